#pragma once

// A model's trainable tensor with its gradient, by name: what optimizers update, what
// workers pull and push, what checkpoints hold.

#include <string>
#include <vector>

#include "core/expected.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

/// A trainable tensor and the gradient its last backward pass computed.
struct Parameter {
  std::string name;
  Tensor* value = nullptr;
  Tensor* grad = nullptr;
};

/// Sets params[i] from values[i] (pulled from parameter servers, read from a checkpoint):
/// moved in on the CPU, copied to the parameter's device otherwise. A shape that differs
/// is an invalid_argument error naming the parameter, and nothing is set.
Status assign(const std::vector<Parameter>& params, std::vector<Tensor> values);

}  // namespace troupe::core
