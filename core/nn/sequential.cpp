#include "core/nn/sequential.hpp"

#include "core/nn/activations.hpp"
#include "core/nn/conv2d.hpp"
#include "core/nn/dense.hpp"

namespace troupe::core {

void Sequential::add(std::unique_ptr<Layer> layer) {
  // A layer's input gradient is needed only when some layer below it has parameters.
  bool below_trainable = false;
  for (auto& l : layers_)
    below_trainable = below_trainable || !l->parameters().empty();
  layer->set_input_grad(below_trainable);
  if (layer->device() != device_ || layer->precision() != precision_) {
    const Status moved = layer->to(device_, precision_);
    TROUPE_ASSERT(moved.ok(), "a layer added to a model on a device no backend serves");
  }
  first_param_.push_back(first_param_.back() + layer->parameters().size());
  layers_.push_back(std::move(layer));
}

Status Sequential::to(Device device, Precision precision) {
  if (auto backend = backend_for(device); !backend) return backend.error();
  for (auto& l : layers_)
    if (auto st = l->to(device, precision); !st) return st;
  device_ = device;
  precision_ = precision;
  return {};
}

Status Sequential::check_input(const Shape& shape) const {
  if (layers_.empty()) return {};
  return layers_.front()->check_input(shape);
}

ConstTensorView Sequential::forward(ConstTensorView x) {
  for (auto& l : layers_)
    x = l->forward(x);
  return x;
}

ConstTensorView Sequential::backward(ConstTensorView dy) {
  return backward(dy, nullptr);
}

ConstTensorView Sequential::backward(ConstTensorView dy,
                                     const std::function<void(size_t)>& layer_done) {
  for (size_t i = layers_.size(); i-- > 0;) {
    dy = layers_[i]->backward(dy);
    if (layer_done) layer_done(i);
  }
  return dy;
}

void Sequential::backward_parameters(ConstTensorView dy,
                                     const std::function<void(size_t)>& gradient_done) {
  if (!gradient_done) {
    backward(dy);
    return;
  }
  backward(dy, [&](size_t layer) {
    for (size_t p = first_param_[layer + 1]; p-- > first_param_[layer];)
      gradient_done(p);
  });
}

std::vector<size_t> Sequential::gradient_order() {
  std::vector<size_t> order;
  for (size_t p = first_param_.back(); p-- > 0;)
    order.push_back(p);
  return order;
}

std::vector<Parameter> Sequential::parameters() {
  std::vector<Parameter> all;
  for (auto& l : layers_)
    for (auto& p : l->parameters())
      all.push_back(p);
  return all;
}

int64_t Sequential::num_parameters() {
  int64_t n = 0;
  for (auto& p : parameters())
    n += p.value->size();
  return n;
}

std::unique_ptr<Sequential> make_mlp(const std::vector<int64_t>& widths, uint64_t seed) {
  TROUPE_ASSERT(widths.size() >= 2, "an MLP needs an input and an output width");
  auto m = std::make_unique<Sequential>();
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    // Hidden layers: ReLU, fused into the Dense (the last layer's outputs are logits).
    m->emplace<Dense>("dense_" + std::to_string(i), widths[i], widths[i + 1], seed + i,
                      i + 2 < widths.size() ? Activation::relu : Activation::none);
  }
  return m;
}

std::unique_ptr<Sequential> make_cnn(uint64_t seed) {
  auto m = std::make_unique<Sequential>();
  m->emplace<Reshape>("reshape", Shape{28, 28, 1});
  m->emplace<Conv2D>("conv2d", 1, 32, 3, seed);
  m->emplace<ReLU>("relu_0");
  m->emplace<Reshape>("flatten", Shape{26 * 26 * 32});
  m->emplace<Dense>("dense_0", 26 * 26 * 32, 128, seed + 1, Activation::relu);
  m->emplace<Dense>("dense_1", 128, 10, seed + 2);
  return m;
}

Expected<std::unique_ptr<Sequential>> make_model(const std::string& name, uint64_t seed) {
  if (name == "mlp") return Expected<std::unique_ptr<Sequential>>(make_mlp({784, 128, 10}, seed));
  if (name == "cnn") return Expected<std::unique_ptr<Sequential>>(make_cnn(seed));
  if (name == "deep_mlp")
    return Expected<std::unique_ptr<Sequential>>(make_mlp({784, 1024, 1024, 1024, 10}, seed));
  return make_error(Errc::invalid_argument,
                    "unknown model '" + name + "' (known: mlp, cnn, deep_mlp)");
}

}  // namespace troupe::core
