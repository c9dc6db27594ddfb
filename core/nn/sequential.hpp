#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "core/nn/classifier.hpp"
#include "core/nn/layer.hpp"

namespace troupe::core {

/// Layers applied in order. Layers with no trainable layer below them compute no input
/// gradient.
///
///   auto model = make_mlp({784, 128, 10}, /*seed=*/1);
///   auto logits = model->forward(batch.features);
class Sequential final : public Classifier {
 public:
  Sequential() = default;
  Sequential(const Sequential&) = delete;
  Sequential& operator=(const Sequential&) = delete;

  template <class L, class... Args>
  L& emplace(Args&&... args) {
    auto layer = std::make_unique<L>(std::forward<Args>(args)...);
    L& ref = *layer;
    add(std::move(layer));
    return ref;
  }
  void add(std::unique_ptr<Layer> layer);

  ConstTensorView forward(ConstTensorView x) override;
  /// The first layer's check of an input shape (the others follow from it).
  Status check_input(const Shape& shape) const override;
  /// Back-propagates dy (the gradient of the loss with respect to the output of the last
  /// forward) and leaves each parameter's gradient in Parameter::grad. Returns the gradient
  /// with respect to the input (empty unless the first layer's input_grad() is on).
  ConstTensorView backward(ConstTensorView dy);
  /// As backward(dy), calling `layer_done(i)` as soon as layer i's parameter gradients are
  /// final (last layer first): a data-parallel step starts reducing them while the earlier
  /// layers' are computed.
  ConstTensorView backward(ConstTensorView dy, const std::function<void(size_t)>& layer_done);
  /// Classifier's: the layers' parameters reported last layer first, each layer's last
  /// parameter first.
  void backward_parameters(ConstTensorView dy,
                           const std::function<void(size_t)>& gradient_done) override;
  /// The parameters from the last to the first.
  std::vector<size_t> gradient_order() override;
  /// Every parameter, in layer order; stable for the model's lifetime.
  std::vector<Parameter> parameters() override;
  int64_t num_parameters();

  size_t size() const { return layers_.size(); }
  Layer& layer(size_t i) { return *layers_[i]; }

  /// Moves every layer to `device`, computing there in `precision` (Layer::to). A device
  /// no backend serves is an error naming it, and nothing moves.
  Status to(Device device, Precision precision = Precision::float32) override;
  Device device() const override { return device_; }
  Precision precision() const override { return precision_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<size_t> first_param_{0};  // layer i's first parameter; then the count
  Device device_;
  Precision precision_ = Precision::float32;
};

/// Dense layers of the given widths, ReLU-activated but the last (logits).
std::unique_ptr<Sequential> make_mlp(const std::vector<int64_t>& widths, uint64_t seed);
/// The CNN of TensorFlow's multi-worker tutorial on 28x28x1 inputs given as [batch, 784]:
/// Conv2D(32, 3x3) ReLU, Flatten, Dense 128 ReLU, Dense 10.
std::unique_ptr<Sequential> make_cnn(uint64_t seed);
/// "mlp" (784-128-10), "cnn", or "deep_mlp" (784-1024-1024-1024-10: 2.9M parameters,
/// for measuring gradient reduction that overlaps the backward pass).
Expected<std::unique_ptr<Sequential>> make_model(const std::string& name, uint64_t seed);

}  // namespace troupe::core
