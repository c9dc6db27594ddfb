#pragma once

// Dynamic loss scaling, as Keras' LossScaleOptimizer does it for mixed_float16: the loss's
// gradient is multiplied by `scale` so that small gradients survive float16's narrow range;
// a step whose gradients are not all finite is skipped (nothing applied) and the scale
// halved; after `growth_interval` finite steps in a row the scale doubles.
//
//   LossScale ls;                           // 2^15, doubling after 2000 good steps
//   loss.set_grad_scale(ls.scale());
//   ... backward ...
//   if (ls.update(backend.all_finite(grads))) { unscale by 1 / scale; apply; }

#include <cstdint>
#include <vector>

#include "core/backend.hpp"

namespace troupe::core {

struct LossScaleOptions {
  float initial = 32768.0f;  // Keras: 2 ** 15
  int64_t growth_interval = 2000;
  float factor = 2.0f;
};

class LossScale {
 public:
  explicit LossScale(LossScaleOptions o = {}) : o_(o), scale_(o.initial) {}

  float scale() const { return scale_; }
  /// Records a step whose gradients were (not) all finite; returns whether to apply them.
  /// The scale returned by scale() afterwards is the next step's. It never drops below 1.
  bool update(bool finite) {
    if (!finite) {
      ++skipped_;
      good_ = 0;
      scale_ = scale_ / o_.factor < 1.0f ? 1.0f : scale_ / o_.factor;
      return false;
    }
    if (++good_ >= o_.growth_interval) {
      good_ = 0;
      const float grown = scale_ * o_.factor;
      if (grown < 3.0e38f) scale_ = grown;
    }
    return true;
  }
  int64_t skipped_steps() const { return skipped_; }
  const LossScaleOptions& options() const { return o_; }

 private:
  LossScaleOptions o_;
  float scale_;
  int64_t good_ = 0;
  int64_t skipped_ = 0;
};

/// The end of a loss-scaled step: whether `grads` (computed from a loss scaled by
/// ls.scale()) are all finite; if so they are divided by the scale and true is returned,
/// else the step is recorded as skipped and false returned (apply nothing). The scale is
/// updated either way.
inline bool unscale_gradients(LossScale& ls, Backend& backend,
                              const std::vector<TensorView>& grads) {
  std::vector<ConstTensorView> read(grads.begin(), grads.end());
  const float scale = ls.scale();
  if (!ls.update(backend.all_finite(read))) return false;
  for (const auto& g : grads)
    backend.scale(g, 1.0f / scale);
  return true;
}

}  // namespace troupe::core
