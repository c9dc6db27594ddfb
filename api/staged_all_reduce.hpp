#pragma once

// Device buffers reduced by a host implementation (the CPU ring) through the device's host
// memory (pinned on CUDA): copied out, reduced, copied back, on the device's stream, so the
// copies are ordered after the kernels that made the buffers and before those that read
// them. Where NCCL cannot run (two workers on one GPU, no NCCL), this is what carries a
// device model's gradient buckets, on the collective engine's thread as the ring does.

#include <functional>
#include <memory>

#include "core/backend.hpp"
#include "core/collective/collective.hpp"

namespace troupe {

class HostStagedAllReduce final : public collective::Implementation {
 public:
  /// `host` reduces host buffers (the elastic ring's current ring, say).
  explicit HostStagedAllReduce(std::function<collective::Implementation&()> host)
      : host_(std::move(host)) {}
  collective::Communication kind() const override { return collective::Communication::ring; }
  const char* name() const override { return "ring through host memory"; }
  bool enabled(const collective::AllReduceOptions& o) const override {
    return o.memory == collective::Memory::device;
  }
  core::Status all_reduce(const collective::AllReduceOptions& o) override;
  /// Bytes of host memory held for staging (grown to the largest reduction seen).
  size_t staged_bytes() const { return capacity_; }

 private:
  std::function<collective::Implementation&()> host_;
  core::DeviceMemory staging_;  // the device's host memory: pinned on CUDA
  size_t capacity_ = 0;
  core::Device staging_device_;
};

}  // namespace troupe
