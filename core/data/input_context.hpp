#pragma once

#include <cstdint>
#include <string>

#include "core/expected.hpp"

namespace troupe::core {

/// What a dataset function needs to know about where it runs, as tf.distribute.InputContext:
/// how many input pipelines there are, which one this is, and how many replicas consume
/// each global batch.
struct InputContext {
  int64_t num_input_pipelines = 1;
  int64_t input_pipeline_id = 0;
  int64_t num_replicas_in_sync = 1;

  /// The batch each replica takes from a global batch; a global batch not divisible by the
  /// number of replicas is an invalid_argument error.
  Expected<int64_t> per_replica_batch_size(int64_t global_batch_size) const {
    if (num_replicas_in_sync <= 0 || global_batch_size % num_replicas_in_sync != 0)
      return make_error(Errc::invalid_argument, "global batch size " +
                                                    std::to_string(global_batch_size) +
                                                    " is not divisible by num_replicas_in_sync " +
                                                    std::to_string(num_replicas_in_sync));
    return global_batch_size / num_replicas_in_sync;
  }
};

}  // namespace troupe::core
