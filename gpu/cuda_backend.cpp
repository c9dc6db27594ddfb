// The CUDA backend's life, memory and copies; its kernels are in cuda_dense.cpp (cuBLASLt),
// cuda_conv.cpp (cuDNN) and cuda_ops.cpp (gpu/kernels).
#include "gpu/cuda_backend.hpp"

#include "core/half.hpp"
#include "gpu/cuda_internal.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gpu/kernels/launch.hpp"

namespace troupe::gpu {

namespace {

std::string gib(size_t bytes) {
  return std::to_string(static_cast<int>(static_cast<double>(bytes) / (1 << 30) + 0.5)) + " GiB";
}

}  // namespace

CudaBackend::CudaBackend(int index) : index_(index) {}

core::Expected<std::unique_ptr<CudaBackend>> CudaBackend::create(int index) {
  std::unique_ptr<CudaBackend> b(new CudaBackend(index));
  auto fail = [&](const std::string& what) {
    return core::make_error(core::Errc::unavailable,
                            "CUDA device cuda:" + std::to_string(index) + ": " + what);
  };
  if (cudaSetDevice(index) != cudaSuccess) return fail(cudaGetErrorString(cudaGetLastError()));
  cudaDeviceProp prop{};
  if (auto e = cudaGetDeviceProperties(&prop, index); e != cudaSuccess)
    return fail(std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e));
  b->cc_ = prop.major * 10 + prop.minor;
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  b->name_ = std::string(prop.name) + " (sm_" + std::to_string(b->cc_) + ", " +
             gib(prop.totalGlobalMem) + ", driver " + std::to_string(driver / 1000) + "." +
             std::to_string(driver % 1000 / 10) + ", runtime " + std::to_string(runtime / 1000) +
             "." + std::to_string(runtime % 1000 / 10) + ")";
  if (auto e = cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking); e != cudaSuccess)
    return fail(std::string("cudaStreamCreate: ") + cudaGetErrorString(e));
  // The pool keeps what is freed: a step's buffers come back from it, not from the driver.
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, index) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  if (auto s = cublasLtCreate(&b->lt_); s != CUBLAS_STATUS_SUCCESS)
    return fail(std::string("cublasLtCreate: ") + cublasLtGetStatusString(s));
  if (auto s = cudnnCreate(&b->dnn_); s != CUDNN_STATUS_SUCCESS)
    return fail(std::string("cudnnCreate: ") + cudnnGetErrorString(s));
  cudnnSetStream(b->dnn_, b->stream_);
  b->staging_ = std::make_unique<Staging>();
  for (int i = 0; i < 2; ++i) {
    if (auto e = cudaMallocHost(&b->staging_->buffer[i], kStagingBytes); e != cudaSuccess)
      return fail(std::string("cudaMallocHost (staging): ") + cudaGetErrorString(e));
    if (auto e = cudaEventCreateWithFlags(&b->staging_->done[i], cudaEventDisableTiming);
        e != cudaSuccess)
      return fail(std::string("cudaEventCreate: ") + cudaGetErrorString(e));
  }
  b->counters_ = b->allocate(4096);
  if (b->broken()) return *b->error_;
  return b;
}

CudaBackend::~CudaBackend() {
  set_device();
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  counters_.reset();
  scratch_.clear();
  gemms_.reset();
  if (staging_)
    for (int i = 0; i < 2; ++i) {
      if (staging_->buffer[i] != nullptr) cudaFreeHost(staging_->buffer[i]);
      if (staging_->done[i] != nullptr) cudaEventDestroy(staging_->done[i]);
    }
  if (dnn_ != nullptr) cudnnDestroy(dnn_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

bool CudaBackend::fast(core::Precision p) const {
  switch (p) {
    case core::Precision::float32:
      return true;
    case core::Precision::tf32:
    case core::Precision::mixed_bfloat16:
      return cc_ >= 80;  // Ampere and later: TF32 and bf16 tensor cores
    case core::Precision::mixed_float16:
      return cc_ >= 70;
  }
  return false;
}

void CudaBackend::set_device() const {
  cudaSetDevice(index_);
}

bool CudaBackend::failed(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return false;
  if (!error_)
    error_ = core::Error{core::Errc::unavailable,
                         std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                             " on cuda:" + std::to_string(index_) + ": " + cudaGetErrorString(e)};
  return true;
}

bool CudaBackend::failed(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return false;
  if (!error_)
    error_ =
        core::Error{core::Errc::unavailable,
                    std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        " on cuda:" + std::to_string(index_) + ": " + cublasLtGetStatusString(s)};
  return true;
}

bool CudaBackend::failed(cudnnStatus_t s, const char* call, const char* file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return false;
  if (!error_)
    error_ = core::Error{core::Errc::unavailable,
                         std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                             " on cuda:" + std::to_string(index_) + ": " + cudnnGetErrorString(s)};
  return true;
}

core::Status CudaBackend::synchronize() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  (void)failed(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", __FILE__, __LINE__);
  if (!error_) return {};
  core::Error e = *error_;
  error_.reset();
  return e;
}

std::shared_ptr<void> CudaBackend::record_event() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  cudaEvent_t e = nullptr;
  if (failed(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", __FILE__,
             __LINE__))
    return nullptr;
  if (failed(cudaEventRecord(e, stream_), "cudaEventRecord", __FILE__, __LINE__)) {
    cudaEventDestroy(e);
    return nullptr;
  }
  // Destroying an event whose work is pending is allowed: CUDA frees it once reached.
  return std::shared_ptr<void>(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
}

core::DeviceMemory CudaBackend::allocate(size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  void* p = nullptr;
  // Never a null block: a tensor of zero bytes still has an address on its device.
  if (failed(cudaMallocAsync(&p, bytes == 0 ? 256 : bytes, stream_), "cudaMallocAsync", __FILE__,
             __LINE__))
    p = nullptr;
  return core::DeviceMemory(p, core::DeviceFree{this, false});
}

void CudaBackend::deallocate(void* p) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  (void)failed(cudaFreeAsync(p, stream_), "cudaFreeAsync", __FILE__, __LINE__);
}

core::DeviceMemory CudaBackend::allocate_host(size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  void* p = nullptr;
  if (failed(cudaMallocHost(&p, bytes == 0 ? 64 : bytes), "cudaMallocHost", __FILE__, __LINE__))
    p = nullptr;
  return core::DeviceMemory(p, core::DeviceFree{this, true});
}

void CudaBackend::deallocate_host(void* p) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  cudaStreamSynchronize(stream_);  // no DMA may still read it
  cudaFreeHost(p);
}

void CudaBackend::copy(void* dst, core::Device dst_device, const void* src, core::Device src_device,
                       size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (bytes == 0 || broken()) return;
  set_device();
  if (!src_device.is_cpu() && !dst_device.is_cpu()) {
    TROUPE_GPU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  const bool upload = src_device.is_cpu();
  const void* host = upload ? src : dst;
  cudaPointerAttributes attr{};
  const bool pinned =
      cudaPointerGetAttributes(&attr, host) == cudaSuccess && attr.type == cudaMemoryTypeHost;
  cudaGetLastError();  // an unregistered pointer is not an error here
  if (pinned) {        // DMA straight from or into it
    TROUPE_GPU_TRY(cudaMemcpyAsync(
        dst, src, bytes, upload ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream_));
    if (!upload) TROUPE_GPU_TRY(cudaStreamSynchronize(stream_));
    return;
  }
  auto& st = *staging_;
  if (upload) {  // this chunk copied in while the last one's DMA runs
    for (size_t at = 0; at < bytes; at += kStagingBytes) {
      const size_t n = std::min(kStagingBytes, bytes - at);
      const int slot = st.next;
      st.next ^= 1;
      TROUPE_GPU_TRY(cudaEventSynchronize(st.done[slot]));  // its last DMA has ended
      std::memcpy(st.buffer[slot], static_cast<const char*>(src) + at, n);
      TROUPE_GPU_TRY(cudaMemcpyAsync(static_cast<char*>(dst) + at, st.buffer[slot], n,
                                     cudaMemcpyHostToDevice, stream_));
      TROUPE_GPU_TRY(cudaEventRecord(st.done[slot], stream_));
    }
    return;
  }
  // Down: the next chunk's DMA runs while this one is copied out. A buffer's DMA is queued
  // after its earlier ones on the stream, and after this thread copied it out.
  auto fetch = [&](size_t at, int slot) {
    if (at >= bytes) return true;
    TROUPE_GPU_TRY(
        cudaMemcpyAsync(st.buffer[slot], static_cast<const char*>(src) + at,
                        std::min(kStagingBytes, bytes - at), cudaMemcpyDeviceToHost, stream_),
        false);
    TROUPE_GPU_TRY(cudaEventRecord(st.done[slot], stream_), false);
    return true;
  };
  int slot = st.next;
  if (!fetch(0, slot)) return;
  for (size_t at = 0; at < bytes; at += kStagingBytes) {
    if (!fetch(at + kStagingBytes, slot ^ 1)) return;
    TROUPE_GPU_TRY(cudaEventSynchronize(st.done[slot]));
    std::memcpy(static_cast<char*>(dst) + at, st.buffer[slot], std::min(kStagingBytes, bytes - at));
    slot ^= 1;
  }
  st.next = slot;
}

void CudaBackend::fill(core::TensorView x, float value) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken() || x.size() == 0) return;
  set_device();
  if (value == 0.0f) {
    TROUPE_GPU_TRY(cudaMemsetAsync(x.data(), 0, x.bytes(), stream_));
    return;
  }
  uint64_t pattern = 0;
  switch (x.dtype()) {
    case core::DType::float32: {
      uint32_t u;
      std::memcpy(&u, &value, sizeof u);
      pattern = u;
      break;
    }
    case core::DType::bfloat16:
      pattern = core::float_to_bf16(value);
      break;
    case core::DType::float16:
      pattern = core::float_to_fp16(value);
      break;
    case core::DType::int32:
      pattern = static_cast<uint32_t>(static_cast<int32_t>(value));
      break;
    case core::DType::int64:
      pattern = static_cast<uint64_t>(static_cast<int64_t>(value));
      break;
  }
  TROUPE_GPU_TRY(launch::fill(stream_, x.data(), x.size(),
                              static_cast<int>(core::dtype_size(x.dtype())), pattern));
}

void* CudaBackend::scratch(int slot, size_t bytes) {
  auto& s = scratch_[slot];
  if (s.bytes < bytes || !s.memory) {
    s.memory.reset();
    s.memory = allocate(bytes);
    s.bytes = bytes;
  }
  return s.memory.get();
}

}  // namespace troupe::gpu
