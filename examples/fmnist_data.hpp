#pragma once

// The training input of the distributed Fashion-MNIST examples: each worker's shard of the
// 60k training images, shuffled (seeded per worker), repeated, in batches (fmnist_fit's:
// named columns, `features` [784] and `label`, as its Keras model reads them).

#include <iostream>
#include <string>

#include "core/data/dataset.hpp"
#include "core/data/idx.hpp"
#include "core/data/input_context.hpp"

namespace troupe::examples {

/// A file that cannot be read fails the dataset function with the reader's error (file
/// and offset): value() of the error throws it, the worker's dataset iterator turns it
/// back into that error, and the chief's create_per_worker_dataset() returns it. It is
/// also printed on stderr, prefixed with `program`.
inline core::Dataset<core::Batch> fmnist_train_batches(const std::string& program,
                                                       const std::string& data_dir,
                                                       const core::InputContext& ctx, int batch,
                                                       uint64_t seed, size_t shuffle_buffer,
                                                       bool columns = false) {
  auto train = core::load_fashion_mnist(data_dir, "train");
  if (!train) std::cerr << program << ": " << train.error().to_string() << std::endl;
  auto ds = core::from_vector(std::move(train).value())
                .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
                .shuffle(shuffle_buffer, seed + static_cast<uint64_t>(ctx.input_pipeline_id))
                .repeat();
  if (columns) return ds.batch(static_cast<size_t>(batch), true).map(core::collate_classes);
  return core::to_batches(ds, static_cast<size_t>(batch), /*drop_remainder=*/true);
}

}  // namespace troupe::examples
