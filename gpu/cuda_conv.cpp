// Conv2D on cuDNN: NHWC activations, the kernel transposed from Keras' [k, k, c, f] (HWIO)
// to cuDNN's NHWC filter layout [f, k, k, c] (OHWI) and its gradient back; the bias and
// its gradient in gpu/kernels. Descriptors and algorithms (cuDNN's heuristic, first that
// fits) are made per input shape and kept in the layer's workspace. float32 forbids TF32
// (CUDNN_FMA_MATH) so that it matches the CPU; tf32 allows it; the mixed policies convolve
// their rounded operands in float32 (cuDNN's bf16/fp16 paths write low-precision outputs,
// which this backend's float32 activations do not take).
#include <array>

#include "gpu/cuda_backend.hpp"
#include "gpu/kernels/launch.hpp"

namespace troupe::gpu {

namespace {

struct CudnnConv final : core::Workspace {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  std::array<int64_t, 6> shape{};  // n, h, w, c, k, f
  core::Precision precision = core::Precision::float32;
  bool ready = false;
  core::Tensor workspace;  // bytes, on the device
  core::Tensor w_ohwi, dw_ohwi, x_rounded, w_rounded, dy_rounded;

  ~CudnnConv() override {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
  }
};

int rounding_of(core::Precision p) {
  return p == core::Precision::mixed_bfloat16 ? 1 : (p == core::Precision::mixed_float16 ? 2 : 0);
}

core::Tensor& on(core::Tensor& t, core::Device d, int64_t elements) {
  if (t.device() != d || t.size() < elements)
    t = core::Tensor(core::Shape{elements}, core::DType::float32, d);
  return t;
}

}  // namespace

// Descriptors and algorithms for this shape and policy (kept while they stay the same).
static bool prepare(CudaBackend& be, cudnnHandle_t h, CudnnConv& cw, core::ConstTensorView x,
                    core::ConstTensorView w, core::Precision p) {
  const std::array<int64_t, 6> shape{x.shape()[0], x.shape()[1], x.shape()[2],
                                     x.shape()[3], w.shape()[0], w.shape()[3]};
  if (cw.ready && cw.shape == shape && cw.precision == p) return true;
  const int n = static_cast<int>(shape[0]), hh = static_cast<int>(shape[1]),
            ww = static_cast<int>(shape[2]), c = static_cast<int>(shape[3]),
            k = static_cast<int>(shape[4]), f = static_cast<int>(shape[5]);
  auto bad = [&](cudnnStatus_t s, const char* call) {
    return be.failed(s, call, __FILE__, __LINE__);
  };
  if (cw.x == nullptr) {
    if (bad(cudnnCreateTensorDescriptor(&cw.x), "cudnnCreateTensorDescriptor") ||
        bad(cudnnCreateTensorDescriptor(&cw.y), "cudnnCreateTensorDescriptor") ||
        bad(cudnnCreateFilterDescriptor(&cw.w), "cudnnCreateFilterDescriptor") ||
        bad(cudnnCreateConvolutionDescriptor(&cw.conv), "cudnnCreateConvolutionDescriptor"))
      return false;
  }
  if (bad(cudnnSetTensor4dDescriptor(cw.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, c, hh, ww),
          "cudnnSetTensor4dDescriptor") ||
      bad(cudnnSetTensor4dDescriptor(cw.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, f, hh - k + 1,
                                     ww - k + 1),
          "cudnnSetTensor4dDescriptor") ||
      bad(cudnnSetFilter4dDescriptor(cw.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, f, c, k, k),
          "cudnnSetFilter4dDescriptor") ||
      bad(cudnnSetConvolution2dDescriptor(cw.conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor") ||
      bad(cudnnSetConvolutionMathType(
              cw.conv, p == core::Precision::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH),
          "cudnnSetConvolutionMathType"))
    return false;
  constexpr int kAsk = 8;
  int got = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kAsk];
  cudnnConvolutionBwdFilterAlgoPerf_t bf[kAsk];
  cudnnConvolutionBwdDataAlgoPerf_t bd[kAsk];
  if (bad(cudnnGetConvolutionForwardAlgorithm_v7(h, cw.x, cw.w, cw.conv, cw.y, kAsk, &got, fwd),
          "cudnnGetConvolutionForwardAlgorithm_v7") ||
      got == 0)
    return false;
  cw.fwd = fwd[0].algo;
  if (bad(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, cw.x, cw.y, cw.conv, cw.w, kAsk, &got,
                                                        bf),
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7") ||
      got == 0)
    return false;
  cw.bwd_filter = bf[0].algo;
  if (bad(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, cw.w, cw.y, cw.conv, cw.x, kAsk, &got, bd),
          "cudnnGetConvolutionBackwardDataAlgorithm_v7") ||
      got == 0)
    return false;
  cw.bwd_data = bd[0].algo;
  size_t a = 0, b = 0, d = 0;
  if (bad(cudnnGetConvolutionForwardWorkspaceSize(h, cw.x, cw.w, cw.conv, cw.y, cw.fwd, &a),
          "cudnnGetConvolutionForwardWorkspaceSize") ||
      bad(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, cw.x, cw.y, cw.conv, cw.w,
                                                         cw.bwd_filter, &b),
          "cudnnGetConvolutionBackwardFilterWorkspaceSize") ||
      bad(cudnnGetConvolutionBackwardDataWorkspaceSize(h, cw.w, cw.y, cw.conv, cw.x, cw.bwd_data,
                                                       &d),
          "cudnnGetConvolutionBackwardDataWorkspaceSize"))
    return false;
  const size_t bytes = std::max({a, b, d, size_t{256}});
  on(cw.workspace, be.device(), static_cast<int64_t>((bytes + 3) / 4));
  cw.shape = shape;
  cw.precision = p;
  cw.ready = true;
  return true;
}

// The layer's workspace, ready for this shape and policy; null after a failure (kept).
static CudnnConv* ready(CudaBackend& be, cudnnHandle_t h, std::unique_ptr<core::Workspace>& ws,
                        core::ConstTensorView x, core::ConstTensorView w, core::Precision p) {
  if (be.broken()) return nullptr;
  if (!ws) ws = std::make_unique<CudnnConv>();
  auto& cw = static_cast<CudnnConv&>(*ws);
  return prepare(be, h, cw, x, w, p) ? &cw : nullptr;
}

void CudaBackend::conv2d_forward(core::ConstTensorView x, core::ConstTensorView w,
                                 core::ConstTensorView b, core::TensorView y,
                                 std::unique_ptr<core::Workspace>& ws, core::Precision p) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  CudnnConv* found = ready(*this, dnn_, ws, x, w, p);
  if (found == nullptr) return;
  auto& cw = *found;
  const int64_t k = w.shape()[0], c = w.shape()[2], f = w.shape()[3];
  on(cw.w_ohwi, device(), w.size());
  TROUPE_GPU_TRY(launch::hwio_to_ohwi(stream_, w.data(), cw.w_ohwi.data(), k * k, c, f));
  const float* xs = x.data();
  const float* wsrc = cw.w_ohwi.data();
  if (const int t = rounding_of(p); t != 0) {
    on(cw.x_rounded, device(), x.size());
    on(cw.w_rounded, device(), w.size());
    TROUPE_GPU_TRY(launch::round_values(stream_, x.data(), cw.x_rounded.data(), x.size(), t));
    TROUPE_GPU_TRY(
        launch::round_values(stream_, cw.w_ohwi.data(), cw.w_rounded.data(), w.size(), t));
    xs = cw.x_rounded.data();
    wsrc = cw.w_rounded.data();
  }
  const float one = 1.0f, zero = 0.0f;
  TROUPE_GPU_TRY(cudnnConvolutionForward(dnn_, &one, cw.x, xs, cw.w, wsrc, cw.conv, cw.fwd,
                                         cw.workspace.data(), cw.workspace.bytes(), &zero, cw.y,
                                         y.data()));
  TROUPE_GPU_TRY(launch::add_bias(stream_, y.data(), b.data(), y.size(), f));
}

void CudaBackend::conv2d_backward(core::ConstTensorView x, core::ConstTensorView w,
                                  core::ConstTensorView dy, core::TensorView dw,
                                  core::TensorView db, core::TensorView dx,
                                  std::unique_ptr<core::Workspace>& ws, core::Precision p) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  CudnnConv* found = ready(*this, dnn_, ws, x, w, p);
  if (found == nullptr) return;
  auto& cw = *found;
  const int64_t k = w.shape()[0], c = w.shape()[2], f = w.shape()[3];
  const int t = rounding_of(p);
  // The forward's operands (its rounded copies stay in the workspace until the next one).
  const float* xs = t != 0 ? cw.x_rounded.data() : x.data();
  const float* wsrc = t != 0 ? cw.w_rounded.data() : cw.w_ohwi.data();
  const float* g = dy.data();
  if (t != 0) {
    on(cw.dy_rounded, device(), dy.size());
    TROUPE_GPU_TRY(launch::round_values(stream_, dy.data(), cw.dy_rounded.data(), dy.size(), t));
    g = cw.dy_rounded.data();
  }
  on(cw.dw_ohwi, device(), w.size());
  const float one = 1.0f, zero = 0.0f;
  TROUPE_GPU_TRY(cudnnConvolutionBackwardFilter(
      dnn_, &one, cw.x, xs, cw.y, g, cw.conv, cw.bwd_filter, cw.workspace.data(),
      cw.workspace.bytes(), &zero, cw.w, cw.dw_ohwi.data()));
  TROUPE_GPU_TRY(launch::ohwi_to_hwio(stream_, cw.dw_ohwi.data(), dw.data(), k * k, c, f));
  TROUPE_GPU_TRY(launch::column_sum(stream_, dy.data(), nullptr, db.data(), dy.size() / f, f));
  if (dx.empty()) return;
  TROUPE_GPU_TRY(cudnnConvolutionBackwardData(dnn_, &one, cw.w, wsrc, cw.y, g, cw.conv, cw.bwd_data,
                                              cw.workspace.data(), cw.workspace.bytes(), &zero,
                                              cw.x, dx.data()));
}

}  // namespace troupe::gpu
