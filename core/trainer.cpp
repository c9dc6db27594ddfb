#include "core/trainer.hpp"

namespace troupe::core {

ClassifierTrainer::ClassifierTrainer(Sequential& model, Optimizer& optimizer)
    : model_(model), optimizer_(optimizer), params_(model.parameters()) {
  for (auto& p : params_)
    slots_.push_back(optimizer_.make_slots(p.value->shape()));
  size_t first = 0;
  for (size_t i = 0; i < model_.size(); ++i) {
    first_param_.push_back(first);
    first += model_.layer(i).parameters().size();
  }
  first_param_.push_back(first);
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

Expected<float> ClassifierTrainer::compute_gradients(
    ConstTensorView x, const int32_t* labels, const std::function<void(size_t)>& gradient_done) {
  if (auto st = model_.check_input(x.shape()); !st) return st.error();
  const ConstTensorView logits = model_.forward(x);
  auto loss = loss_.forward(logits, labels);
  if (!loss) return loss;
  if (!gradient_done) {
    model_.backward(loss_.backward());
    return loss;
  }
  model_.backward(loss_.backward(), [&](size_t layer) {
    for (size_t i = first_param_[layer + 1]; i-- > first_param_[layer];)
      gradient_done(i);
  });
  return loss;
}

Status ClassifierTrainer::apply_gradients() {
  for (size_t i = 0; i < params_.size(); ++i)
    if (auto st = optimizer_.apply_dense(*params_[i].value, *params_[i].grad, slots_[i]); !st)
      return st;
  return {};
}

Status ClassifierTrainer::evaluate_batch(ConstTensorView x, const int32_t* labels,
                                         Accuracy& accuracy, Mean& loss) {
  if (auto st = model_.check_input(x.shape()); !st) return st;
  const ConstTensorView logits = model_.forward(x);
  auto l = loss_.forward(logits, labels);
  if (!l) return l.error();
  accuracy.update(logits, labels);
  loss.update(*l, static_cast<double>(logits.shape()[0]));
  return {};
}

}  // namespace troupe::core
