#pragma once

// The synthetic batch the classifier step benchmarks train on (bench_train_step on the
// CPU, bench_gpu on a GPU): 784 normal features per example, labels cycling over 10.

#include <cstdint>
#include <vector>

#include "core/partitioner.hpp"
#include "core/tensor.hpp"

namespace troupe::bench {

struct ClassifierBatch {
  core::Tensor x;
  std::vector<int32_t> labels;
};

inline ClassifierBatch classifier_batch(int batch) {
  ClassifierBatch b{
      core::initialize(core::Shape{batch, 784}, {core::Initializer::Kind::random_normal, 0.3f, 7}),
      std::vector<int32_t>(static_cast<size_t>(batch))};
  for (int i = 0; i < batch; ++i)
    b.labels[static_cast<size_t>(i)] = i % 10;
  return b;
}

}  // namespace troupe::bench
