// gpu/: the RAII wrappers and the NCCL implementation behind the collective interface.
// On a machine without a GPU (CI) the GPU cases say so and check instead that every call
// fails as an error value naming the call and file:line, never as a crash.
#include <catch2/catch.hpp>

#include <numeric>

#include "gpu/cuda.hpp"
#include "gpu/nccl.hpp"

using namespace troupe;

namespace {

// One rank: the "shared" id is the one it made.
core::Status share_alone(char*, size_t) {
  return {};
}

}  // namespace

TEST_CASE("without a GPU every CUDA call is an error value naming the call", "[gpu]") {
  if (gpu::device_count() > 0) {
    WARN("a GPU is present: the no-GPU error path is not exercised here");
    return;
  }
  auto stream = gpu::Stream::create(0);
  REQUIRE_FALSE(stream.ok());
  CHECK(stream.error().code == core::Errc::unavailable);
  CHECK_THAT(stream.error().message,
             Catch::Contains("cudaSetDevice") && Catch::Contains("cuda.cpp:"));
  auto buffer = gpu::DeviceBuffer::create(0, 16);
  REQUIRE_FALSE(buffer.ok());
  auto nccl = gpu::NcclImplementation::create(0, 1, 0, share_alone);
  REQUIRE_FALSE(nccl.ok());
  CHECK_THAT(nccl.error().message, Catch::Contains("failed at"));
}

TEST_CASE("device buffers round-trip and refuse an oversized copy", "[gpu]") {
  if (gpu::device_count() == 0) {
    WARN("no GPU: skipped");
    return;
  }
  auto stream = gpu::Stream::create(0);
  REQUIRE(stream.ok());
  auto buffer = gpu::DeviceBuffer::create(0, 1000);
  REQUIRE(buffer.ok());
  std::vector<float> in(1000), out(1000, -1.0f);
  std::iota(in.begin(), in.end(), 0.0f);
  REQUIRE(buffer->upload(in.data(), in.size(), *stream).ok());
  REQUIRE(buffer->download(out.data(), out.size(), *stream).ok());
  CHECK(out == in);
  auto too_big = buffer->upload(in.data(), 1001, *stream);
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.error().code == core::Errc::invalid_argument);
  gpu::DeviceBuffer moved = std::move(*buffer);
  CHECK(moved.count() == 1000);
  CHECK(buffer->data() == nullptr);
}

TEST_CASE("NCCL all-reduces device buffers behind the collective interface", "[gpu]") {
  if (gpu::device_count() == 0) {
    WARN("no GPU: skipped");
    return;
  }
  auto nccl = gpu::NcclImplementation::create(0, 1, 0, share_alone);
  REQUIRE(nccl.ok());
  std::vector<std::unique_ptr<collective::Implementation>> impls;
  impls.push_back(std::move(*nccl));
  collective::Group group(0, 1, collective::Communication::nccl, std::move(impls));
  auto stream = gpu::Stream::create(0);
  REQUIRE(stream.ok());
  auto a = gpu::DeviceBuffer::create(0, 4097);
  auto b = gpu::DeviceBuffer::create(0, 3);
  REQUIRE((a.ok() && b.ok()));
  std::vector<float> ha(4097), hb{1.5f, -2.0f, 3.0f};
  std::iota(ha.begin(), ha.end(), 1.0f);
  REQUIRE(a->upload(ha.data(), ha.size(), *stream).ok());
  REQUIRE(b->upload(hb.data(), hb.size(), *stream).ok());
  collective::AllReduceOptions o;
  o.inputs = {{a->data(), a->count()}, {b->data(), b->count()}};
  o.memory = collective::Memory::device;
  o.reduction = collective::Reduction::mean;
  o.tag = "grads";
  REQUIRE(collective::all_reduce(group, o).ok());
  std::vector<float> ra(4097), rb(3);
  REQUIRE(a->download(ra.data(), ra.size(), *stream).ok());
  REQUIRE(b->download(rb.data(), rb.size(), *stream).ok());
  CHECK(ra == ha);  // one rank: its own values are the sum and the mean
  CHECK(rb == hb);
  // Host buffers are not NCCL's: with the NCCL hint that is an error, not a fallback.
  o.memory = collective::Memory::host;
  CHECK_FALSE(group.choose(o).ok());
}
