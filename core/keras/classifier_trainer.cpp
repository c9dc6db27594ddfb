#include "core/keras/classifier_trainer.hpp"

#include <cmath>

namespace troupe::core::keras {

ClassifierTrainer::ClassifierTrainer(ClassifierGraph& model, Optimizer& optimizer,
                                     LossScaleOptions loss_scale)
    : model_(model),
      optimizer_(optimizer),
      params_(model.parameters()),
      scaling_(needs_loss_scale(model.precision())),
      loss_scale_(loss_scale) {
  for (auto& p : params_)
    slots_.push_back(optimizer_.make_slots(p.value->shape(), p.value->device()));
}

Expected<float> ClassifierTrainer::train_step(ConstTensorView x, const int32_t* labels) {
  auto loss = compute_gradients(x, labels);
  if (!loss) return loss;
  if (auto st = apply_gradients(); !st) return st.error();
  return loss;
}

Expected<float> ClassifierTrainer::compute_gradients(ConstTensorView x, const int32_t* labels) {
  return compute_gradients(x, labels, nullptr);
}

Status ClassifierTrainer::device_status(float loss) {
  // A device backend that failed skips its kernels and gives a NaN loss: its error (the
  // failed call, named) is what the step reports.
  if (std::isfinite(loss) || model_.device().is_cpu()) return {};
  auto backend = backend_for(model_.device());
  if (!backend) return backend.error();
  return (*backend)->synchronize();
}

ConstTensorView ClassifierTrainer::on_model_device(ConstTensorView x) {
  if (x.device() == model_.device()) return x;
  if (input_.device() != model_.device() || input_.dtype() != x.dtype())
    input_ = Tensor(x.shape(), x.dtype(), model_.device());
  input_.resize(x.shape());
  copy(x, input_);
  return input_;
}

Expected<float> ClassifierTrainer::compute_gradients(
    ConstTensorView x, const int32_t* labels, const std::function<void(size_t)>& gradient_done) {
  if (auto st = model_.check_input(x.shape()); !st) return st.error();
  loss_.set_grad_scale(scaling_ ? loss_scale_.scale() : 1.0f);
  const ConstTensorView logits = model_.forward(on_model_device(x));
  auto loss = loss_.forward(logits, labels);
  if (!loss) return loss;
  if (auto st = device_status(*loss); !st) return st.error();
  model_.backward_parameters(loss_.backward(), gradient_done);
  return loss;
}

Status ClassifierTrainer::apply_gradients() {
  if (scaling_) {
    std::vector<TensorView> grads;
    for (auto& p : params_)
      grads.push_back(*p.grad);
    auto backend = backend_for(model_.device());
    if (!backend) return backend.error();
    if (!unscale_gradients(loss_scale_, **backend, grads)) return {};  // skipped
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (auto st = optimizer_.apply_dense(*params_[i].value, *params_[i].grad, slots_[i]); !st)
      return st;
  return {};
}

Status ClassifierTrainer::evaluate_batch(ConstTensorView x, const int32_t* labels,
                                         Accuracy& accuracy, Mean& loss) {
  if (auto st = model_.check_input(x.shape()); !st) return st;
  const ConstTensorView logits = model_.forward(on_model_device(x));
  auto l = loss_.forward(logits, labels);
  if (!l) return l.error();
  if (auto st = device_status(*l); !st) return st;
  accuracy.update(logits, loss_.labels());
  loss.update(*l, static_cast<double>(logits.shape()[0]));
  return {};
}

}  // namespace troupe::core::keras
