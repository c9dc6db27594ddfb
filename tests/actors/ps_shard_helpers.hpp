#pragma once

// What the PS shard tests share: a variable definition and a wire tensor in one line each.

#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "net/wire.hpp"

namespace troupe::test {

/// A variable initialized to 1, learning rate 0.5.
inline net::VariableDef def(const std::string& name, std::vector<int64_t> shape,
                            const std::string& opt = "sgd") {
  net::VariableDef d;
  d.name = name;
  d.shape = std::move(shape);
  d.init_kind = static_cast<int32_t>(core::Initializer::Kind::constant);
  d.init_value = 1.0f;
  d.optimizer = opt;
  d.learning_rate = 0.5f;
  return d;
}

inline net::WireTensor tensor(std::vector<int64_t> dims, std::vector<float> data) {
  return {std::move(dims), std::move(data)};
}

}  // namespace troupe::test
