#pragma once

// NCCL behind the collective interface: all-reduce of device buffers. The ranks share
// NCCL's unique id through a bootstrap the caller gives (the CPU ring's broadcast in the
// strategy): rank 0 makes the id, every rank passes the bytes through `share_id`.
//
//   auto nccl = gpu::NcclImplementation::create(rank, size, /*device=*/0, share_id);
//   impls.push_back(std::move(*nccl));   // before the ring: device buffers go to NCCL

#include <nccl.h>

#include <functional>
#include <memory>

#include "core/collective/collective.hpp"
#include "core/expected.hpp"
#include "gpu/cuda.hpp"

namespace troupe::gpu {

/// Copies rank 0's `n` bytes at `bytes` to every rank.
using ShareId = std::function<core::Status(char* bytes, size_t n)>;

class NcclCommunicator {
 public:
  static core::Expected<NcclCommunicator> create(int rank, int size, int device,
                                                 const ShareId& share_id);
  NcclCommunicator() = default;
  NcclCommunicator(NcclCommunicator&& o) noexcept : comm_(o.comm_) { o.comm_ = nullptr; }
  NcclCommunicator& operator=(NcclCommunicator&& o) noexcept;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator();

  ncclComm_t get() const { return comm_; }
  /// Ends the communicator's pending work (after a stall); it cannot be used again.
  void abort();

 private:
  explicit NcclCommunicator(ncclComm_t c) : comm_(c) {}
  ncclComm_t comm_ = nullptr;
};

class NcclImplementation final : public collective::Implementation {
 public:
  static core::Expected<std::unique_ptr<NcclImplementation>> create(int rank, int size, int device,
                                                                    const ShareId& share_id);
  collective::Communication kind() const override { return collective::Communication::nccl; }
  const char* name() const override { return "nccl"; }
  bool enabled(const collective::AllReduceOptions& o) const override {
    return o.memory == collective::Memory::device && !aborted_;
  }
  /// In place, on this implementation's stream; waits for the result. A peer that never
  /// comes makes it give up after the timeout (60 s when none is given) with an error
  /// naming the tag; the communicator is then aborted.
  core::Status all_reduce(const collective::AllReduceOptions& o) override;

 private:
  NcclImplementation(NcclCommunicator comm, Stream stream, int device)
      : comm_(std::move(comm)), stream_(std::move(stream)), device_(device) {}
  NcclCommunicator comm_;
  Stream stream_;
  int device_;
  bool aborted_ = false;
};

}  // namespace troupe::gpu
