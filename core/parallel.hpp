#pragma once

// Intra-op parallelism: the threads one training step may use for its own work (the dense
// layers' matrix products, the embedding gather and scatter). One pool per process, sized
// once by the program (`--intra-op-threads`, as TensorFlow's intra_op_parallelism_threads);
// at its default of 1 everything runs on the caller's thread, as before.

#include <algorithm>
#include <cstdint>
#include <functional>

namespace troupe::core {

/// Threads a parallel_for uses, the caller's included (>= 1).
int intra_op_threads();
/// Sets the pool's size (clamped to [1, 256]); call it before training starts, not while
/// a parallel_for runs.
void set_intra_op_threads(int threads);

/// Calls fn(begin, end) on contiguous chunks covering [0, n), at most intra_op_threads()
/// of them, none smaller than `grain` (so small work stays on the caller's thread), and
/// returns when every chunk is done. The caller runs one chunk. A parallel_for from inside
/// another, or from a second thread while one runs, runs serially on its caller.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

/// Elements below which a chunk of element-wise work is not worth a thread's wake-up: the
/// grain of the CPU kernels' parallel_for calls.
inline constexpr int64_t kParallelGrain = int64_t{1} << 14;

/// Rows of `width` elements per chunk, so that a chunk holds at least kParallelGrain
/// elements (and at least one row).
inline int64_t rows_per_chunk(int64_t width) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, width));
}

}  // namespace troupe::core
