#pragma once

// The collective interface every all-reduce implementation sits behind (the CPU ring in
// actors/collective, NCCL in gpu/), and the free function that picks one. Nothing here
// knows sockets or CUDA: an implementation says whether it can take a request, and the
// first one in the group's order that can (and that the `communication` hint allows) runs.
//
//   collective::AllReduceOptions o;
//   o.inputs = {{grad.data(), grad.size()}};
//   o.reduction = collective::Reduction::mean;
//   o.tag = "step 7";
//   if (auto st = collective::all_reduce(group, o); !st) ...

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/expected.hpp"

namespace troupe::collective {

enum class Reduction { sum, mean };

/// TensorFlow's CommunicationImplementation: which all-reduce to use.
enum class Communication {
  automatic,  // the first implementation enabled for the request (NCCL for device buffers)
  ring,       // the CPU ring only
  nccl,       // NCCL only: an error when it is not built, has no GPU, or the inputs are on the host
};

const char* to_string(Communication c);
/// "auto", "ring" or "nccl" (any case); anything else is an invalid_argument error naming it.
core::Expected<Communication> parse_communication(const std::string& text);

/// Where an input's floats live.
enum class Memory { host, device };

/// A float buffer reduced in place, on the host or on a device.
struct Buffer {
  Buffer() = default;
  /// `count` floats at `data`, on `device` (the host when left out).
  Buffer(float* data_, size_t count_, core::Device device_ = {})
      : data(data_), count(count_), device(device_) {}
  float* data = nullptr;
  size_t count = 0;
  core::Device device;
};

/// One all-reduce: every rank of the group calls it with the same tag and buffer sizes.
struct AllReduceOptions {
  std::vector<Buffer> inputs;
  Memory memory = Memory::host;
  Reduction reduction = Reduction::sum;
  std::string tag;
  /// How long to wait for the other ranks (the stall report); 0: the implementation's own.
  std::chrono::milliseconds timeout{0};
  /// How the floats travel between ranks: float32, or bfloat16 (half the bytes, sums kept
  /// in float32, every rank ending with the same values; Horovod's fp16 compression, for
  /// gradients, not for counts that must stay exact). The CPU ring carries both; NCCL
  /// takes float32 only (bfloat16 requests go to the ring, through host memory).
  core::DType wire = core::DType::float32;
  /// Device buffers: the stream that produced them (a cudaStream_t, as the device's
  /// backend gives it) and a point in it after which they are final (its event). An
  /// implementation on a stream of its own waits for that point, and makes `stream`'s later
  /// work wait for the result: ordered by events, no host waiting.
  void* stream = nullptr;
  std::shared_ptr<void> ready;
  /// Whether all_reduce returns once the result is there (true), or once it is ordered
  /// before `stream`'s later work (device buffers; a stalled peer is then reported by the
  /// next call that waits: every step ends with one).
  bool wait = true;
};

/// Memory::device when the buffers live on a device (they must all live on one), else host.
Memory memory_of(const std::vector<Buffer>& buffers);

/// An all-reduce implementation for one group of ranks (gloo's algorithm, Horovod's
/// AllreduceOp).
class Implementation {
 public:
  virtual ~Implementation() = default;
  virtual Communication kind() const = 0;
  virtual const char* name() const = 0;
  /// Whether this implementation can run `options` (memory kind, build, devices).
  virtual bool enabled(const AllReduceOptions& options) const = 0;
  virtual core::Status all_reduce(const AllReduceOptions& options) = 0;
};

/// The implementations of one group in order of preference, and the hint.
class Group {
 public:
  Group(int rank, int size, Communication hint,
        std::vector<std::unique_ptr<Implementation>> implementations);
  int rank() const { return rank_; }
  int size() const { return size_; }
  Communication hint() const { return hint_; }
  const std::vector<std::unique_ptr<Implementation>>& implementations() const { return impls_; }
  /// The implementation that runs `options`: the first enabled one the hint allows; an
  /// error saying what was asked and what each implementation lacks otherwise.
  core::Expected<Implementation*> choose(const AllReduceOptions& options) const;

 private:
  int rank_, size_;
  Communication hint_;
  std::vector<std::unique_ptr<Implementation>> impls_;
};

/// Reduces `options.inputs` across the group in place with the implementation chosen.
core::Status all_reduce(Group& group, const AllReduceOptions& options);

}  // namespace troupe::collective
