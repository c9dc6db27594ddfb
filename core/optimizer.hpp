#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/expected.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

/// The optimizer state of one variable (or one shard of it): slot tensors of the variable's
/// shape and the number of updates applied. A shard's slots are made from the shard's shape,
/// so slots are sharded exactly like their variable.
struct SlotSet {
  std::vector<Tensor> slots;
  int64_t iterations = 0;
};

/// Applies gradients to variables with Keras 3's formulas and defaults
/// (keras/src/optimizers/*.py). Dense updates touch every element; sparse updates touch
/// only the rows an embedding batch used (for Adam this is the "lazy" variant: untouched
/// rows keep their moments, where Keras 3 densifies the gradient and moves every row's).
/// Variables on a device are updated there by its backend, with the same formulas
/// (config() describes them); slots live where their variable does.
///
///   Adam adam(0.001f);
///   adam.set_weight_decay(0.004f);               // AdamW
///   SlotSet s = adam.make_slots(w.shape());
///   adam.apply_dense(w, grad, s);
class Optimizer {
 public:
  explicit Optimizer(float learning_rate) : learning_rate_(learning_rate) {}
  virtual ~Optimizer() = default;

  virtual std::string name() const = 0;
  virtual std::vector<std::string> slot_names() const { return {}; }
  float learning_rate() const { return learning_rate_; }
  void set_learning_rate(float lr) { learning_rate_ = lr; }
  /// Keras 3's decoupled weight decay, which its base optimizer applies for every kind
  /// (AdamW is Adam with it): before each update, w -= w * wd * lr on the elements the
  /// update touches: all of a dense update's, a sparse update's rows. (Keras decays the
  /// whole variable every step; rows a batch did not use are not decayed here.)
  void set_weight_decay(float wd) { weight_decay_ = wd; }
  float weight_decay() const { return weight_decay_; }
  /// Keras's ExponentialDecay schedule (steps 0: none): update t (1-based) uses
  /// learning_rate() * rate^((t - 1) / steps), the exponent floored under staircase.
  void set_learning_rate_decay(int64_t steps, float rate, bool staircase);
  /// The learning rate of update t (1-based), after the schedule.
  float learning_rate_at(int64_t t) const;

  /// The per-element formula and its hyper-parameters, as data for a device's kernels.
  OptimizerConfig config() const;

  /// Slots of a variable of `shape` on `device`.
  SlotSet make_slots(const Shape& shape, Device device = Device::cpu()) const;

  /// var -= f(grad); grad must have var's shape and live on var's device.
  Status apply_dense(TensorView var, ConstTensorView grad, SlotSet& slots);
  /// Updates rows `rows` of var with `grad_rows` ([rows.size(), row_size]). Repeated rows
  /// are summed first, as TensorFlow does (on the CPU; a variable on a device takes unique
  /// rows). Rows outside var are an out_of_range error and nothing is applied.
  Status apply_sparse(TensorView var, const std::vector<int64_t>& rows, ConstTensorView grad_rows,
                      SlotSet& slots);
  /// The CPU's update of n contiguous elements (what apply_dense does on the host): the
  /// weight decay, then the kind's update, at update t's learning rate.
  void update_elements(float* w, const float* g, float* const* slots, int64_t n, int64_t t);

 protected:
  virtual float slot_initial_value(size_t /*slot*/) const { return 0.0f; }
  /// The kind's part of config(): its kind and hyper-parameters (the learning rate, its
  /// schedule and the weight decay are the base's).
  virtual OptimizerConfig kind_config() const = 0;
  /// Updates n contiguous elements: w and g, and slots[i] at the same positions in slot i,
  /// at learning rate lr. t is the 1-based number of this update.
  virtual void update(float* w, const float* g, float* const* slots, int64_t n, float lr,
                      int64_t t) = 0;

 private:
  Status apply_rows_on_device(TensorView var, const std::vector<int64_t>& rows,
                              ConstTensorView grad_rows, SlotSet& slots);

  float learning_rate_;
  float weight_decay_ = 0.0f;
  int64_t decay_steps_ = 0;
  float decay_rate_ = 1.0f;
  bool staircase_ = false;
  std::vector<int64_t> order_;  // scratch of apply_sparse
  Tensor merged_;               // scratch of apply_sparse
  Tensor device_rows_;          // rows of apply_sparse on a device
};

class SGD final : public Optimizer {
 public:
  explicit SGD(float learning_rate = 0.01f) : Optimizer(learning_rate) {}
  std::string name() const override { return "sgd"; }
  OptimizerConfig kind_config() const override;

 protected:
  void update(float* w, const float* g, float* const* slots, int64_t n, float lr,
              int64_t t) override;
};

/// Keras SGD with momentum: v = m*v - lr*g; w += v (Nesterov: w += m*v - lr*g).
class Momentum final : public Optimizer {
 public:
  explicit Momentum(float learning_rate = 0.01f, float momentum = 0.9f, bool nesterov = false)
      : Optimizer(learning_rate), momentum_(momentum), nesterov_(nesterov) {}
  std::string name() const override { return nesterov_ ? "nesterov" : "momentum"; }
  OptimizerConfig kind_config() const override;
  std::vector<std::string> slot_names() const override { return {"momentum"}; }

 protected:
  void update(float* w, const float* g, float* const* slots, int64_t n, float lr,
              int64_t t) override;

 private:
  float momentum_;
  bool nesterov_;
};

/// a += g^2; w -= lr * g / sqrt(a + eps), a starting at initial_accumulator_value (Keras 3:
/// epsilon inside the root; Keras 2 and TensorFlow's kernel added it outside).
class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(float learning_rate = 0.001f, float initial_accumulator_value = 0.1f,
                   float epsilon = 1e-7f)
      : Optimizer(learning_rate), initial_(initial_accumulator_value), epsilon_(epsilon) {}
  std::string name() const override { return "adagrad"; }
  OptimizerConfig kind_config() const override;
  std::vector<std::string> slot_names() const override { return {"accumulator"}; }

 protected:
  float slot_initial_value(size_t) const override { return initial_; }
  void update(float* w, const float* g, float* const* slots, int64_t n, float lr,
              int64_t t) override;

 private:
  float initial_;
  float epsilon_;
};

/// m += (g - m)(1-b1); v += (g^2 - v)(1-b2); w -= lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)
/// (amsgrad is not implemented).
class Adam final : public Optimizer {
 public:
  explicit Adam(float learning_rate = 0.001f, float beta_1 = 0.9f, float beta_2 = 0.999f,
                float epsilon = 1e-7f)
      : Optimizer(learning_rate), beta_1_(beta_1), beta_2_(beta_2), epsilon_(epsilon) {}
  std::string name() const override { return "adam"; }
  OptimizerConfig kind_config() const override;
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }

 protected:
  void update(float* w, const float* g, float* const* slots, int64_t n, float lr,
              int64_t t) override;

 private:
  float beta_1_, beta_2_, epsilon_;
};

/// ms = rho*ms + (1-rho)*g^2; w -= lr * g / sqrt(ms + eps) (Keras 3: epsilon inside the
/// root); with momentum > 0 the step goes through a momentum slot:
/// mom = momentum*mom + lr*g/sqrt(ms+eps); w -= mom. (centered is not implemented.)
class RMSprop final : public Optimizer {
 public:
  explicit RMSprop(float learning_rate = 0.001f, float rho = 0.9f, float momentum = 0.0f,
                   float epsilon = 1e-7f)
      : Optimizer(learning_rate), rho_(rho), momentum_(momentum), epsilon_(epsilon) {}
  std::string name() const override { return "rmsprop"; }
  OptimizerConfig kind_config() const override;
  std::vector<std::string> slot_names() const override;

 protected:
  void update(float* w, const float* g, float* const* slots, int64_t n, float lr,
              int64_t t) override;

 private:
  float rho_, momentum_, epsilon_;
};

/// FTRL-Proximal (McMahan et al. 2013), as TensorFlow's and Keras's Ftrl, for sparse
/// click-through features. Per element, with n the accumulator and z the linear slot:
///   n' = n + g^2;  z += g + 2 * l2_shrinkage * w - (n'^(-p) - n^(-p)) / lr * w;
///   w = |z| <= l1 ? 0 : (sign(z) * l1 - z) / ((n'^(-p) + beta) / lr + 2 * l2);  n = n'
/// with p = learning_rate_power (-0.5: square roots). l1 > 0 drives weights to exactly 0.
class Ftrl final : public Optimizer {
 public:
  explicit Ftrl(float learning_rate = 0.001f, float learning_rate_power = -0.5f,
                float initial_accumulator_value = 0.1f, float l1 = 0.0f, float l2 = 0.0f,
                float beta = 0.0f, float l2_shrinkage = 0.0f)
      : Optimizer(learning_rate),
        power_(learning_rate_power),
        initial_(initial_accumulator_value),
        l1_(l1),
        l2_(l2),
        beta_(beta),
        l2_shrinkage_(l2_shrinkage) {}
  std::string name() const override { return "ftrl"; }
  OptimizerConfig kind_config() const override;
  std::vector<std::string> slot_names() const override { return {"accumulator", "linear"}; }

 protected:
  float slot_initial_value(size_t slot) const override { return slot == 0 ? initial_ : 0.0f; }
  void update(float* w, const float* g, float* const* slots, int64_t n, float lr,
              int64_t t) override;

 private:
  float power_, initial_, l1_, l2_, beta_, l2_shrinkage_;
};

/// Makes the optimizer a config describes.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config);
/// Makes an optimizer from its name (sgd, momentum, nesterov, adagrad, adam, adamw, rmsprop,
/// ftrl) with Keras defaults for everything but the learning rate (adamw: Adam with Keras's
/// AdamW weight decay of 0.004).
Expected<std::unique_ptr<Optimizer>> make_optimizer(const std::string& name, float learning_rate);

/// The optimizer `text` describes: optimizer_text's JSON (core/optimizer_config.hpp), or a
/// name with `learning_rate` (make_optimizer's).
Expected<std::unique_ptr<Optimizer>> make_optimizer_from(const std::string& text,
                                                         float learning_rate);

}  // namespace troupe::core
