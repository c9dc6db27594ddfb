// Launchers of the sparse layers' kernels: pooling, the factorization machine, an embedding
// call's gather and scatter, and the padding of uneven convolutions.
#include "core/kernels/fm.hpp"
#include "core/kernels/gather_index.hpp"
#include "core/kernels/grid.cuh"
#include "gpu/kernels/sparse_launch.hpp"

namespace troupe::gpu::launch {

using core::kernels::grid::run;
namespace ck = core::kernels;

cudaError_t pool2d_forward(cudaStream_t s, const ck::Pool2dShape& shape,
                           const core::Pool2dGeometry& g, bool max, const float* x, float* y) {
  const ck::Pool2dShape sh = shape;
  const core::Pool2dGeometry geo = g;
  return run(s, sh.n * sh.oh * sh.ow * sh.c,
             [=] __device__(int64_t o) { ck::pool2d_forward(o, sh, geo, max, x, y); });
}

cudaError_t pool2d_backward(cudaStream_t s, const ck::Pool2dShape& shape,
                            const core::Pool2dGeometry& g, bool max, const float* x, const float* y,
                            const float* dy, float* dx) {
  const ck::Pool2dShape sh = shape;
  const core::Pool2dGeometry geo = g;
  return run(s, sh.n * sh.oh * sh.ow * sh.c,
             [=] __device__(int64_t o) { ck::pool2d_backward(o, sh, geo, max, x, y, dy, dx); });
}

cudaError_t fm_forward(cudaStream_t s, const float* x, float* y, int64_t b, int64_t fields,
                       int64_t k) {
  return run(s, b, [=] __device__(int64_t i) { ck::fm_forward(i, fields, k, x, y); });
}

cudaError_t fm_backward(cudaStream_t s, const float* x, const float* dy, float* dx, int64_t b,
                        int64_t fields, int64_t k) {
  return run(s, b * k, [=] __device__(int64_t t) { ck::fm_backward(t, fields, k, x, dy, dx); });
}

cudaError_t gather_index(cudaStream_t s, const float* rows, const int32_t* index, float* y,
                         int64_t n, int64_t d) {
  return run(s, n * d, [=] __device__(int64_t i) { ck::gather_index(i, d, rows, index, y); });
}

cudaError_t scatter_add_index(cudaStream_t s, const float* dy, const int32_t* index, float* grads,
                              int64_t n, int64_t d) {
  return run(s, n * d,
             [=] __device__(int64_t i) { ck::scatter_add_index(i, d, dy, index, grads); });
}

cudaError_t pad_image(cudaStream_t s, const kernels::PadShape& shape, const float* x,
                      float* padded) {
  const kernels::PadShape sh = shape;
  return run(s, sh.n * sh.ph * sh.pw * sh.c,
             [=] __device__(int64_t i) { kernels::pad_image(i, sh, x, padded); });
}

cudaError_t crop_image(cudaStream_t s, const kernels::PadShape& shape, const float* padded,
                       float* x) {
  const kernels::PadShape sh = shape;
  return run(s, sh.n * sh.h * sh.w * sh.c,
             [=] __device__(int64_t i) { kernels::crop_image(i, sh, padded, x); });
}

}  // namespace troupe::gpu::launch
