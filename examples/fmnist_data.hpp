#pragma once

// The training input of the distributed Fashion-MNIST examples: each worker's shard of the
// 60k training images, shuffled (seeded per worker), repeated, in batches.

#include <iostream>
#include <string>

#include "core/data/dataset.hpp"
#include "core/data/idx.hpp"
#include "core/data/input_context.hpp"

namespace troupe::examples {

/// A file that cannot be read ends the data at once (after an error naming it on stderr,
/// prefixed with `program`); the step that asks for a batch then fails.
inline core::Dataset<core::Batch> fmnist_train_batches(const std::string& program,
                                                       const std::string& data_dir,
                                                       const core::InputContext& ctx, int batch,
                                                       uint64_t seed, size_t shuffle_buffer) {
  auto train = core::load_fashion_mnist(data_dir, "train");
  if (!train) {
    std::cerr << program << ": " << train.error().to_string() << std::endl;
    return core::to_batches(core::from_vector(std::vector<core::Example>{}), 1, true);
  }
  auto ds = core::from_vector(std::move(*train))
                .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
                .shuffle(shuffle_buffer, seed + static_cast<uint64_t>(ctx.input_pipeline_id))
                .repeat();
  return core::to_batches(ds, static_cast<size_t>(batch), /*drop_remainder=*/true);
}

}  // namespace troupe::examples
