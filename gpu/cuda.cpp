#include "gpu/cuda.hpp"

#include "gpu/check.hpp"

namespace troupe::gpu {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device / no driver" state
    return 0;
  }
  return n;
}

core::Expected<Stream> Stream::create(int device) {
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = o.stream_;
    o.stream_ = nullptr;
  }
  return *this;
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}

core::Status Stream::synchronize() const {
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return {};
}

core::Expected<DeviceBuffer> DeviceBuffer::create(int device, size_t count) {
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  if (count > 0) TROUPE_CUDA_CHECK(cudaMalloc(&p, count * sizeof(float)));
  return DeviceBuffer(static_cast<float*>(p), count);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFree(data_);
    data_ = o.data_;
    count_ = o.count_;
    o.data_ = nullptr;
    o.count_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

core::Status DeviceBuffer::upload(const float* host, size_t n, const Stream& stream) {
  if (n > count_)
    return core::make_error(core::Errc::invalid_argument, "upload of " + std::to_string(n) +
                                                              " floats into a device buffer of " +
                                                              std::to_string(count_));
  TROUPE_CUDA_CHECK(
      cudaMemcpyAsync(data_, host, n * sizeof(float), cudaMemcpyHostToDevice, stream.get()));
  return stream.synchronize();
}

core::Status DeviceBuffer::download(float* host, size_t n, const Stream& stream) const {
  if (n > count_)
    return core::make_error(core::Errc::invalid_argument, "download of " + std::to_string(n) +
                                                              " floats from a device buffer of " +
                                                              std::to_string(count_));
  TROUPE_CUDA_CHECK(
      cudaMemcpyAsync(host, data_, n * sizeof(float), cudaMemcpyDeviceToHost, stream.get()));
  return stream.synchronize();
}

}  // namespace troupe::gpu
