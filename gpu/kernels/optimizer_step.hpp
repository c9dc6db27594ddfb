#pragma once

// A step's optimizer constants for the kernels (host code: the CUDA backend and the host
// tests of the bodies build them the same way).

#include <cmath>
#include <cstdint>

#include "core/backend.hpp"
#include "gpu/kernels/optimizer.cuh"

namespace troupe::gpu::kernels {

/// core::OptimizerConfig as the kernels take it, with Adam's bias-corrected rate for update
/// t (in double on the host, as core::Adam computes it).
inline OptimizerStep optimizer_step(const core::OptimizerConfig& c, int64_t t) {
  using K = core::OptimizerConfig::Kind;
  OptimizerStep s;
  switch (c.kind) {
    case K::sgd:
      s.kind = OptimizerKind::sgd;
      break;
    case K::momentum:
      s.kind = OptimizerKind::momentum;
      break;
    case K::adagrad:
      s.kind = OptimizerKind::adagrad;
      break;
    case K::adam:
      s.kind = OptimizerKind::adam;
      break;
    case K::rmsprop:
      s.kind = OptimizerKind::rmsprop;
      break;
    case K::ftrl:
      s.kind = OptimizerKind::ftrl;
      break;
  }
  s.lr = c.learning_rate_at(t);
  s.weight_decay = c.weight_decay;
  s.l2_shrinkage = c.l2_shrinkage;
  s.momentum = c.momentum;
  s.nesterov = c.nesterov;
  s.beta_1 = c.beta_1;
  s.beta_2 = c.beta_2;
  s.epsilon = c.epsilon;
  s.rho = c.rho;
  s.l1 = c.l1;
  s.l2 = c.l2;
  s.beta = c.beta;
  s.power = c.power;
  // Adam's bias-corrected rate, in double on the host, as core::Adam computes it.
  const double td = static_cast<double>(t);
  s.adam_lr_t = static_cast<float>(s.lr * std::sqrt(1.0 - std::pow(c.beta_2, td)) /
                                   (1.0 - std::pow(c.beta_1, td)));
  return s;
}

}  // namespace troupe::gpu::kernels
