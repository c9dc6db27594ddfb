#pragma once

// The device side of the column reductions (kColumnLanes, gpu/kernels/hd.cuh): a block
// takes a tile of 32 columns and a chunk of rows, thread (c, l) the partial sums of lane l
// of column c over the chunk (a warp reads 32 neighbouring columns of one row), folded in
// shared memory in the order fold_lanes folds them on the host. One chunk: finish(j, sums)
// at once. Several: each block's sums go to stream-ordered scratch, and one thread a column
// adds the chunks' sums in order before finish(j, sums).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/kernels/grid.cuh"
#include "gpu/kernels/hd.cuh"

namespace troupe::gpu::launch::detail {

/// The K sums of each column over its block's chunk of rows: to finish(j, sums) when
/// `partial` is null, else to partial[(chunk * K + k) * cols + j].
template <int K, class MakeTerm, class Finish>
__global__ void __launch_bounds__(32 * kernels::kColumnLanes)
    column_lanes(int64_t rows, int64_t cols, int64_t chunk_rows, MakeTerm make_term, Finish finish,
                 float* partial) {
  namespace k = kernels;
  __shared__ float part[k::kColumnLanes * K][33];
  const int c = threadIdx.x, l = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + c;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  float acc[K];
  if (j < cols) {
    k::lane_sums<K>(l, begin, end, make_term(j), acc);
  } else {
    for (int i = 0; i < K; ++i)
      acc[i] = 0.0f;
  }
  for (int i = 0; i < K; ++i)
    part[l * K + i][c] = acc[i];
  __syncthreads();
  for (int half = k::kColumnLanes / 2; half > 0; half /= 2) {
    if (l < half)
      for (int i = 0; i < K; ++i)
        part[l * K + i][c] += part[(l + half) * K + i][c];
    __syncthreads();
  }
  if (l != 0 || j >= cols) return;
  if (partial == nullptr) {
    float sums[K];
    for (int i = 0; i < K; ++i)
      sums[i] = 0.0f + part[i][c];
    finish(j, sums);
  } else {
    for (int i = 0; i < K; ++i)
      partial[(static_cast<int64_t>(blockIdx.y) * K + i) * cols + j] = part[i][c];
  }
}

/// finish(j, sums) for each of `cols` columns, sums the K sums of make_term(j)'s terms over
/// the rows.
template <int K, class MakeTerm, class Finish>
cudaError_t run_columns(cudaStream_t s, int64_t rows, int64_t cols, MakeTerm make_term,
                        Finish finish) {
  if (cols <= 0) return cudaSuccess;
  const int64_t chunk_rows = kernels::column_chunk_rows(rows, cols);
  const int64_t chunks = rows > 0 ? (rows + chunk_rows - 1) / chunk_rows : 1;
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(chunks));
  const dim3 block(32, kernels::kColumnLanes);
  if (chunks == 1) {
    column_lanes<K><<<grid, block, 0, s>>>(rows, cols, chunk_rows, make_term, finish, nullptr);
    return cudaGetLastError();
  }
  void* scratch = nullptr;
  const size_t bytes = static_cast<size_t>(chunks * K * cols) * sizeof(float);
  if (cudaError_t e = cudaMallocAsync(&scratch, bytes, s); e != cudaSuccess) return e;
  auto* partial = static_cast<float*>(scratch);
  column_lanes<K><<<grid, block, 0, s>>>(rows, cols, chunk_rows, make_term, finish, partial);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess)
    e = core::kernels::grid::run(s, cols, [=] __device__(int64_t j) {
      float sums[K];
      for (int i = 0; i < K; ++i)
        sums[i] = 0.0f;
      for (int64_t ch = 0; ch < chunks; ++ch)
        for (int i = 0; i < K; ++i)
          sums[i] += partial[(ch * K + i) * cols + j];
      finish(j, sums);
    });
  const cudaError_t freed = cudaFreeAsync(scratch, s);
  return e != cudaSuccess ? e : freed;
}

}  // namespace troupe::gpu::launch::detail
