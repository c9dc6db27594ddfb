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
#include "gpu/module.hpp"  // ShareId

namespace troupe::gpu {

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

/// What host buffers get: refused (device buffers only), or staged through device memory.
enum class HostBuffers { refuse, stage };

class NcclImplementation final : public collective::Implementation {
 public:
  /// With HostBuffers::stage, host inputs are copied into one device buffer, reduced there
  /// with a single NCCL call and copied back (models that live on the CPU).
  static core::Expected<std::unique_ptr<NcclImplementation>> create(
      int rank, int size, int device, const ShareId& share_id,
      HostBuffers host = HostBuffers::refuse);
  collective::Communication kind() const override { return collective::Communication::nccl; }
  const char* name() const override { return "nccl"; }
  bool enabled(const collective::AllReduceOptions& o) const override {
    return !aborted_ && o.wire == core::DType::float32 &&
           (o.memory == collective::Memory::device || host_ == HostBuffers::stage);
  }
  /// In place, on this implementation's stream. Device buffers wait there for o.ready and
  /// make o.stream's later work wait for the result; with o.wait off that is all (nothing
  /// waits on the host). Otherwise it waits for the result: a peer that never comes makes
  /// it give up after the timeout (60 s when none is given) with an error naming the tag,
  /// and the communicator is aborted.
  core::Status all_reduce(const collective::AllReduceOptions& o) override;
  ~NcclImplementation() override;
  /// Ends the communicator without waiting for the other ranks (a peer is known lost);
  /// every later all_reduce is an error.
  void abort() {
    comm_.abort();
    aborted_ = true;
  }

 private:
  NcclImplementation(NcclCommunicator comm, Stream stream, int device, HostBuffers host)
      : comm_(std::move(comm)), stream_(std::move(stream)), device_(device), host_(host) {}
  /// Waits for this stream's work, polling so that a stall ends in an error.
  core::Status wait(const collective::AllReduceOptions& o);
  NcclCommunicator comm_;
  Stream stream_;
  int device_;
  HostBuffers host_;
  DeviceBuffer staging_;  // host inputs, fused; grows to the largest all-reduce seen
  bool aborted_ = false;
  cudaEvent_t done_ = nullptr;  // the last device reduction queued here
};

/// The CUDA event behind a Backend::record_event() handle.
cudaEvent_t event_of(const std::shared_ptr<void>& e);

}  // namespace troupe::gpu
