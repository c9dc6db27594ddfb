#pragma once

// Move-only owners of CUDA resources: a stream, and a float buffer in device memory.
//
//   auto n = gpu::device_count();            // 0 without a GPU or driver: skip GPU work
//   auto s = gpu::Stream::create(0).value();
//   auto b = gpu::DeviceBuffer::create(0, 1024).value();
//   b.upload(host.data(), host.size(), s);   // errors are values

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/expected.hpp"

namespace troupe::gpu {

/// GPUs this process can use: 0 when there is none, or no driver (not an error: the
/// callers skip the GPU path).
int device_count();

class Stream {
 public:
  static core::Expected<Stream> create(int device);
  Stream() = default;
  Stream(Stream&& o) noexcept : stream_(o.stream_) { o.stream_ = nullptr; }
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  cudaStream_t get() const { return stream_; }
  core::Status synchronize() const;

 private:
  explicit Stream(cudaStream_t s) : stream_(s) {}
  cudaStream_t stream_ = nullptr;
};

class DeviceBuffer {
 public:
  static core::Expected<DeviceBuffer> create(int device, size_t count);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), count_(o.count_) {
    o.data_ = nullptr;
    o.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  float* data() const { return data_; }
  size_t count() const { return count_; }
  /// Copies `n` floats (n <= count()) in on `stream`, and waits for them.
  core::Status upload(const float* host, size_t n, const Stream& stream);
  core::Status download(float* host, size_t n, const Stream& stream) const;

 private:
  DeviceBuffer(float* d, size_t n) : data_(d), count_(n) {}
  float* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace troupe::gpu
