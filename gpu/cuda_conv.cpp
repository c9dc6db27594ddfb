// Conv2D on cuDNN, with strides, dilation and padding (core::Conv2dGeometry): NHWC
// activations, the kernel transposed from Keras' [kh, kw, c, f] (HWIO) to cuDNN's NHWC
// filter layout [f, kh, kw, c] (OHWI) and its gradient back; the bias and its gradient in
// gpu/kernels. cuDNN pads both sides of an axis alike: an uneven padding (Keras's "same"
// puts the odd one at the bottom and right) pads the input by the difference into a copy
// first, as TensorFlow does, and crops the input's gradient back out of the copy's.
//
// Descriptors and algorithms are made per shape, geometry and policy and kept in the
// layer's workspace. Each pass (forward, backward filter, backward data) takes the first
// algorithm cuDNN's heuristic ranks whose status is success, whose workspace fits
// kMaxWorkspace and whose math type the policy allows, and has a convolution descriptor of
// its own set to that math type. float32 forbids tensor-op math (FMA only) so that it
// matches the CPU; tf32 allows TF32 tensor cores; no policy allows the FP16 down-conversion.
// The mixed policies convolve their rounded operands in float32 (cuDNN's bf16/fp16 paths
// write low-precision outputs, which this backend's float32 activations do not take).
// Every pass converts, pads and rounds its own arguments: a backward pass reads nothing a
// forward pass left.
#include <algorithm>
#include <array>

#include "gpu/cuda_backend.hpp"
#include "gpu/kernels/launch.hpp"
#include "gpu/kernels/sparse_launch.hpp"

namespace troupe::gpu {

namespace {

constexpr size_t kMaxWorkspace = size_t{1} << 30;  // bytes an algorithm may ask for
enum Pass { kForward = 0, kBackwardFilter = 1, kBackwardData = 2 };

// What the descriptors and algorithms depend on.
using ConvKey = std::array<int64_t, 18>;

ConvKey key_of(const core::Conv2dGeometry& g, core::ConstTensorView x, core::ConstTensorView w,
               const core::Shape& y, core::Precision p) {
  return {x.shape()[0], x.shape()[1], x.shape()[2],
          x.shape()[3], w.shape()[0], w.shape()[1],
          w.shape()[3], y[1],         y[2],
          g.stride_h,   g.stride_w,   g.dilation_h,
          g.dilation_w, g.pad_top,    g.pad_bottom,
          g.pad_left,   g.pad_right,  static_cast<int64_t>(p)};
}

struct CudnnConv final : core::Workspace {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  std::array<cudnnConvolutionDescriptor_t, 3> conv{};  // by Pass
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  ConvKey key{};
  bool ready = false;
  kernels::PadShape pad;  // the padded copy's, when padding is uneven
  bool padded = false;
  core::Tensor workspace;  // bytes, on the device
  core::Tensor w_ohwi, dw_ohwi, x_padded, dx_padded, x_rounded, w_rounded, dy_rounded;

  ~CudnnConv() override {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    for (auto* c : conv)
      if (c != nullptr) cudnnDestroyConvolutionDescriptor(c);
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

// Whether policy p lets an algorithm compute in math type m.
bool math_allowed(core::Precision p, cudnnMathType_t m) {
  if (m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH) return true;
  return p == core::Precision::tf32 && m == CUDNN_TENSOR_OP_MATH;
}

// The math type a pass's descriptor gets for its algorithm's: float32 is held to FMA even
// where the heuristic says "default" (which may mean TF32 on Ampere and later).
cudnnMathType_t math_for(core::Precision p, cudnnMathType_t m) {
  return p == core::Precision::tf32 ? m : CUDNN_FMA_MATH;
}

// The first usable algorithm of a heuristic's ranking, or null.
template <class Perf>
const Perf* first_usable(const Perf* perf, int count, core::Precision p) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace &&
        math_allowed(p, perf[i].mathType))
      return &perf[i];
  return nullptr;
}

}  // namespace

// Descriptors and algorithms for this shape, geometry and policy (kept while they stay).
static bool prepare(CudaBackend& be, cudnnHandle_t h, CudnnConv& cw, const core::Conv2dGeometry& g,
                    core::ConstTensorView x, core::ConstTensorView w, const core::Shape& y,
                    core::Precision p) {
  const ConvKey key = key_of(g, x, w, y, p);
  if (cw.ready && cw.key == key) return true;
  cw.ready = false;
  auto bad = [&](cudnnStatus_t s, const char* call) {
    return be.failed(s, call, __FILE__, __LINE__);
  };
  if (cw.x == nullptr) {
    if (bad(cudnnCreateTensorDescriptor(&cw.x), "cudnnCreateTensorDescriptor") ||
        bad(cudnnCreateTensorDescriptor(&cw.y), "cudnnCreateTensorDescriptor") ||
        bad(cudnnCreateFilterDescriptor(&cw.w), "cudnnCreateFilterDescriptor"))
      return false;
    for (auto& c : cw.conv)
      if (bad(cudnnCreateConvolutionDescriptor(&c), "cudnnCreateConvolutionDescriptor"))
        return false;
  }
  const int64_t n = x.shape()[0], hh = x.shape()[1], ww = x.shape()[2], c = x.shape()[3];
  const int64_t kh = w.shape()[0], kw = w.shape()[1], f = w.shape()[3];
  // The even part of the padding is the descriptor's; the rest pads a copy of the input.
  const kernels::SplitPadding split = kernels::split_padding(g, n, hh, ww, c);
  const int64_t even_h = split.even_h, even_w = split.even_w;
  cw.pad = split.pad;
  cw.padded = cw.pad.needed();
  auto i = [](int64_t v) { return static_cast<int>(v); };
  if (bad(cudnnSetTensor4dDescriptor(cw.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, i(n), i(c),
                                     i(cw.pad.ph), i(cw.pad.pw)),
          "cudnnSetTensor4dDescriptor") ||
      bad(cudnnSetTensor4dDescriptor(cw.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, i(n), i(f), i(y[1]),
                                     i(y[2])),
          "cudnnSetTensor4dDescriptor") ||
      bad(cudnnSetFilter4dDescriptor(cw.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, i(f), i(c), i(kh),
                                     i(kw)),
          "cudnnSetFilter4dDescriptor"))
    return false;
  const cudnnMathType_t asked = p == core::Precision::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  for (auto* conv : cw.conv)
    if (bad(cudnnSetConvolution2dDescriptor(conv, i(even_h), i(even_w), i(g.stride_h),
                                            i(g.stride_w), i(g.dilation_h), i(g.dilation_w),
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            "cudnnSetConvolution2dDescriptor") ||
        bad(cudnnSetConvolutionMathType(conv, asked), "cudnnSetConvolutionMathType"))
      return false;
  // cuDNN's output shape must be the layer's.
  int out_n = 0, oc = 0, oh = 0, ow = 0;
  if (bad(cudnnGetConvolution2dForwardOutputDim(cw.conv[kForward], cw.x, cw.w, &out_n, &oc, &oh,
                                                &ow),
          "cudnnGetConvolution2dForwardOutputDim"))
    return false;
  if (out_n != n || oc != f || oh != y[1] || ow != y[2])
    return !bad(CUDNN_STATUS_BAD_PARAM,
                "cudnnGetConvolution2dForwardOutputDim (not the layer's "
                "output shape)");
  constexpr int kAsk = 8;
  int got = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kAsk];
  cudnnConvolutionBwdFilterAlgoPerf_t bf[kAsk];
  cudnnConvolutionBwdDataAlgoPerf_t bd[kAsk];
  if (bad(cudnnGetConvolutionForwardAlgorithm_v7(h, cw.x, cw.w, cw.conv[kForward], cw.y, kAsk, &got,
                                                 fwd),
          "cudnnGetConvolutionForwardAlgorithm_v7"))
    return false;
  const auto* fa = first_usable(fwd, got, p);
  if (bad(fa == nullptr ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS,
          "cudnnGetConvolutionForwardAlgorithm_v7 (no algorithm fits the policy and workspace)"))
    return false;
  if (bad(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, cw.x, cw.y, cw.conv[kBackwardFilter],
                                                        cw.w, kAsk, &got, bf),
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7"))
    return false;
  const auto* fb = first_usable(bf, got, p);
  if (bad(fb == nullptr ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS,
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7 (no algorithm fits the policy and "
          "workspace)"))
    return false;
  if (bad(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, cw.w, cw.y, cw.conv[kBackwardData], cw.x,
                                                      kAsk, &got, bd),
          "cudnnGetConvolutionBackwardDataAlgorithm_v7"))
    return false;
  const auto* fd = first_usable(bd, got, p);
  if (bad(fd == nullptr ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS,
          "cudnnGetConvolutionBackwardDataAlgorithm_v7 (no algorithm fits the policy and "
          "workspace)"))
    return false;
  cw.fwd = fa->algo;
  cw.bwd_filter = fb->algo;
  cw.bwd_data = fd->algo;
  if (bad(cudnnSetConvolutionMathType(cw.conv[kForward], math_for(p, fa->mathType)),
          "cudnnSetConvolutionMathType") ||
      bad(cudnnSetConvolutionMathType(cw.conv[kBackwardFilter], math_for(p, fb->mathType)),
          "cudnnSetConvolutionMathType") ||
      bad(cudnnSetConvolutionMathType(cw.conv[kBackwardData], math_for(p, fd->mathType)),
          "cudnnSetConvolutionMathType"))
    return false;
  const size_t bytes = std::max({fa->memory, fb->memory, fd->memory, size_t{256}});
  on(cw.workspace, be.device(), static_cast<int64_t>((bytes + 3) / 4));
  cw.key = key;
  cw.ready = true;
  return true;
}

// The layer's workspace, ready for this call; null after a failure (kept).
static CudnnConv* ready(CudaBackend& be, cudnnHandle_t h, std::unique_ptr<core::Workspace>& ws,
                        const core::Conv2dGeometry& g, core::ConstTensorView x,
                        core::ConstTensorView w, const core::Shape& y, core::Precision p) {
  if (be.broken()) return nullptr;
  if (!ws) ws = std::make_unique<CudnnConv>();
  auto& cw = static_cast<CudnnConv&>(*ws);
  return prepare(be, h, cw, g, x, w, y, p) ? &cw : nullptr;
}

void CudaBackend::conv2d_forward(const core::Conv2dGeometry& g, core::ConstTensorView x,
                                 core::ConstTensorView w, core::ConstTensorView b,
                                 core::TensorView y, std::unique_ptr<core::Workspace>& ws,
                                 core::Precision p) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  CudnnConv* found = ready(*this, dnn_, ws, g, x, w, y.shape(), p);
  if (found == nullptr) return;
  auto& cw = *found;
  const int64_t khw = w.shape()[0] * w.shape()[1], c = w.shape()[2], f = w.shape()[3];
  on(cw.w_ohwi, device(), w.size());
  TROUPE_GPU_TRY(launch::hwio_to_ohwi(stream_, w.data(), cw.w_ohwi.data(), khw, c, f));
  const float* xs = x.data();
  int64_t x_elements = x.size();
  if (cw.padded) {
    x_elements = cw.pad.n * cw.pad.ph * cw.pad.pw * cw.pad.c;
    on(cw.x_padded, device(), x_elements);
    TROUPE_GPU_TRY(launch::pad_image(stream_, cw.pad, x.data(), cw.x_padded.data()));
    xs = cw.x_padded.data();
  }
  const float* wsrc = cw.w_ohwi.data();
  if (const int t = rounding_of(p); t != 0) {
    on(cw.x_rounded, device(), x_elements);
    on(cw.w_rounded, device(), w.size());
    TROUPE_GPU_TRY(launch::round_values(stream_, xs, cw.x_rounded.data(), x_elements, t));
    TROUPE_GPU_TRY(launch::round_values(stream_, wsrc, cw.w_rounded.data(), w.size(), t));
    xs = cw.x_rounded.data();
    wsrc = cw.w_rounded.data();
  }
  const float one = 1.0f, zero = 0.0f;
  TROUPE_GPU_TRY(cudnnConvolutionForward(dnn_, &one, cw.x, xs, cw.w, wsrc, cw.conv[kForward],
                                         cw.fwd, cw.workspace.data(), cw.workspace.bytes(), &zero,
                                         cw.y, y.data()));
  if (!b.empty()) TROUPE_GPU_TRY(launch::add_bias(stream_, y.data(), b.data(), y.size(), f));
}

void CudaBackend::conv2d_backward(const core::Conv2dGeometry& g, core::ConstTensorView x,
                                  core::ConstTensorView w, core::ConstTensorView dy,
                                  core::TensorView dw, core::TensorView db, core::TensorView dx,
                                  std::unique_ptr<core::Workspace>& ws, core::Precision p) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  CudnnConv* found = ready(*this, dnn_, ws, g, x, w, dy.shape(), p);
  if (found == nullptr) return;
  auto& cw = *found;
  const int64_t khw = w.shape()[0] * w.shape()[1], c = w.shape()[2], f = w.shape()[3];
  const int t = rounding_of(p);
  const float one = 1.0f, zero = 0.0f;
  // dy (rounded under the mixed policies) is read by both passes.
  const float* g16 = dy.data();
  if (t != 0) {
    on(cw.dy_rounded, device(), dy.size());
    TROUPE_GPU_TRY(launch::round_values(stream_, dy.data(), cw.dy_rounded.data(), dy.size(), t));
    g16 = cw.dy_rounded.data();
  }
  if (!db.empty())
    TROUPE_GPU_TRY(launch::column_sum(stream_, dy.data(), nullptr, db.data(), dy.size() / f, f));
  if (!dw.empty()) {
    // The input as the forward pass read it, made again from this call's x.
    const float* xs = x.data();
    int64_t x_elements = x.size();
    if (cw.padded) {
      x_elements = cw.pad.n * cw.pad.ph * cw.pad.pw * cw.pad.c;
      on(cw.x_padded, device(), x_elements);
      TROUPE_GPU_TRY(launch::pad_image(stream_, cw.pad, x.data(), cw.x_padded.data()));
      xs = cw.x_padded.data();
    }
    if (t != 0) {
      on(cw.x_rounded, device(), x_elements);
      TROUPE_GPU_TRY(launch::round_values(stream_, xs, cw.x_rounded.data(), x_elements, t));
      xs = cw.x_rounded.data();
    }
    on(cw.dw_ohwi, device(), w.size());
    TROUPE_GPU_TRY(cudnnConvolutionBackwardFilter(
        dnn_, &one, cw.x, xs, cw.y, g16, cw.conv[kBackwardFilter], cw.bwd_filter,
        cw.workspace.data(), cw.workspace.bytes(), &zero, cw.w, cw.dw_ohwi.data()));
    TROUPE_GPU_TRY(launch::ohwi_to_hwio(stream_, cw.dw_ohwi.data(), dw.data(), khw, c, f));
  }
  if (dx.empty()) return;
  // The kernel as the forward pass read it, from this call's w.
  on(cw.w_ohwi, device(), w.size());
  TROUPE_GPU_TRY(launch::hwio_to_ohwi(stream_, w.data(), cw.w_ohwi.data(), khw, c, f));
  const float* wsrc = cw.w_ohwi.data();
  if (t != 0) {
    on(cw.w_rounded, device(), w.size());
    TROUPE_GPU_TRY(launch::round_values(stream_, wsrc, cw.w_rounded.data(), w.size(), t));
    wsrc = cw.w_rounded.data();
  }
  float* into = dx.data();
  if (cw.padded) {
    on(cw.dx_padded, device(), cw.pad.n * cw.pad.ph * cw.pad.pw * cw.pad.c);
    into = cw.dx_padded.data();
  }
  TROUPE_GPU_TRY(cudnnConvolutionBackwardData(
      dnn_, &one, cw.w, wsrc, cw.y, g16, cw.conv[kBackwardData], cw.bwd_data, cw.workspace.data(),
      cw.workspace.bytes(), &zero, cw.x, into));
  if (cw.padded)
    TROUPE_GPU_TRY(launch::crop_image(stream_, cw.pad, cw.dx_padded.data(), dx.data()));
}

}  // namespace troupe::gpu
