#include "gpu/nccl.hpp"

#include <chrono>
#include <thread>

#include "gpu/check.hpp"

namespace troupe::gpu {

using core::Errc;
using core::make_error;

core::Expected<NcclCommunicator> NcclCommunicator::create(int rank, int size, int device,
                                                          const ShareId& share_id) {
  if (size < 1 || rank < 0 || rank >= size)
    return make_error(Errc::invalid_argument,
                      "nccl: rank " + std::to_string(rank) + " of " + std::to_string(size));
  TROUPE_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id{};
  if (rank == 0) TROUPE_NCCL_CHECK(ncclGetUniqueId(&id));
  if (auto st = share_id(id.internal, sizeof id.internal); !st) return st.error();
  ncclComm_t comm = nullptr;
  TROUPE_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return NcclCommunicator(comm);
}

NcclCommunicator& NcclCommunicator::operator=(NcclCommunicator&& o) noexcept {
  if (this != &o) {
    if (comm_) ncclCommDestroy(comm_);
    comm_ = o.comm_;
    o.comm_ = nullptr;
  }
  return *this;
}

cudaEvent_t event_of(const std::shared_ptr<void>& e) {
  return static_cast<cudaEvent_t>(e.get());
}

NcclImplementation::~NcclImplementation() {
  if (done_ != nullptr) cudaEventDestroy(done_);
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) ncclCommDestroy(comm_);
}

void NcclCommunicator::abort() {
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
}

core::Expected<std::unique_ptr<NcclImplementation>> NcclImplementation::create(
    int rank, int size, int device, const ShareId& share_id, HostBuffers host) {
  auto stream = Stream::create(device);
  if (!stream) return stream.error();
  auto comm = NcclCommunicator::create(rank, size, device, share_id);
  if (!comm) return comm.error();
  return std::unique_ptr<NcclImplementation>(
      new NcclImplementation(std::move(*comm), std::move(*stream), device, host));
}

core::Status NcclImplementation::all_reduce(const collective::AllReduceOptions& o) {
  if (aborted_)
    return make_error(Errc::unavailable, "nccl: the communicator was aborted after a stall");
  const bool staged = o.memory == collective::Memory::host;
  if (staged && host_ != HostBuffers::stage)
    return make_error(Errc::invalid_argument,
                      "nccl all-reduce '" + o.tag + "': host buffers, and staging is off");
  TROUPE_CUDA_CHECK(cudaSetDevice(device_));
  const ncclRedOp_t op = o.reduction == collective::Reduction::mean ? ncclAvg : ncclSum;
  if (staged) {
    size_t total = 0;
    for (const auto& b : o.inputs)
      total += b.count;
    if (staging_.count() < total) {
      staging_ = DeviceBuffer();  // free the old one first
      auto grown = DeviceBuffer::create(device_, total);
      if (!grown) return grown.error();
      staging_ = std::move(*grown);
    }
    size_t at = 0;
    for (const auto& b : o.inputs) {
      if (b.count > 0)
        TROUPE_CUDA_CHECK(cudaMemcpyAsync(staging_.data() + at, b.data, b.count * sizeof(float),
                                          cudaMemcpyHostToDevice, stream_.get()));
      at += b.count;
    }
    if (total > 0)
      TROUPE_NCCL_CHECK(ncclAllReduce(staging_.data(), staging_.data(), total, ncclFloat, op,
                                      comm_.get(), stream_.get()));
  } else {
    // After the point where the producing stream made them final; that stream's later
    // work (the optimizer) after the reduction: ordered by events, no host waiting.
    if (o.ready) TROUPE_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), event_of(o.ready), 0));
    TROUPE_NCCL_CHECK(ncclGroupStart());
    for (const auto& b : o.inputs)
      if (b.count > 0)
        TROUPE_NCCL_CHECK(
            ncclAllReduce(b.data, b.data, b.count, ncclFloat, op, comm_.get(), stream_.get()));
    TROUPE_NCCL_CHECK(ncclGroupEnd());
    if (o.stream != nullptr) {
      if (done_ == nullptr)
        TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
      TROUPE_CUDA_CHECK(cudaEventRecord(done_, stream_.get()));
      TROUPE_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(o.stream), done_, 0));
    }
    if (!o.wait) return {};  // the step's last, waiting call reports a stall
  }
  if (auto st = wait(o); !st) return st;
  if (!staged) return {};
  // Only now: a copy into pageable memory blocks the host until the stream gets there,
  // which would wait out a stalled peer with no timeout.
  size_t at = 0;
  for (const auto& b : o.inputs) {
    if (b.count > 0)
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(b.data, staging_.data() + at, b.count * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream_.get()));
    at += b.count;
  }
  return stream_.synchronize();
}

core::Status NcclImplementation::wait(const collective::AllReduceOptions& o) {
  // Without blocking in the driver, so that a rank that never comes is noticed.
  const auto timeout = o.timeout.count() > 0 ? o.timeout : std::chrono::milliseconds(60000);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream_.get());
    if (q == cudaSuccess) return {};
    if (q != cudaErrorNotReady) TROUPE_CUDA_CHECK(q);
    ncclResult_t async = ncclSuccess;
    TROUPE_NCCL_CHECK(ncclCommGetAsyncError(comm_.get(), &async));
    TROUPE_NCCL_CHECK(async);
    if (std::chrono::steady_clock::now() >= deadline) {
      abort();
      return make_error(Errc::unavailable, "nccl all-reduce '" + o.tag +
                                               "' did not finish within " +
                                               std::to_string(timeout.count()) +
                                               " ms (a rank did not submit); communicator aborted");
    }
    std::this_thread::yield();
  }
}

}  // namespace troupe::gpu
