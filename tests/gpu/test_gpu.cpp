// gpu/: the RAII wrappers and the NCCL implementation behind the collective interface.
// On a machine without a GPU (CI) the GPU cases say so and check instead that every call
// fails as an error value naming the call and file:line, never as a crash.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>

#include "gpu/cuda.hpp"
#include "gpu/nccl.hpp"

using namespace troupe;

namespace {

// One rank: the "shared" id is the one it made.
core::Status share_alone(char*, size_t) {
  return {};
}

// Two ranks as threads of this process, each on its own GPU: rank 0's id handed over in
// memory, with a bounded wait.
struct IdExchange {
  std::mutex m;
  std::condition_variable cv;
  std::vector<char> bytes;
  core::Status share(int rank, char* b, size_t n) {
    std::unique_lock<std::mutex> lock(m);
    if (rank == 0) {
      bytes.assign(b, b + n);
      cv.notify_all();
      return {};
    }
    if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return bytes.size() == n; }))
      return core::make_error(core::Errc::unavailable, "rank 0's NCCL id never came");
    std::memcpy(b, bytes.data(), n);
    return {};
  }
};

// Makes both ranks' implementations (ncclCommInitRank blocks until both have called it).
std::vector<core::Expected<std::unique_ptr<gpu::NcclImplementation>>> two_ranks() {
  IdExchange ids;
  std::vector<core::Expected<std::unique_ptr<gpu::NcclImplementation>>> out;
  out.emplace_back(core::make_error(core::Errc::internal, "not made"));
  out.emplace_back(core::make_error(core::Errc::internal, "not made"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      out[r] = gpu::NcclImplementation::create(
          r, 2, r, [&](char* b, size_t n) { return ids.share(r, b, n); });
    });
  for (auto& t : threads)
    t.join();
  return out;
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

TEST_CASE("NCCL stages host buffers through one device buffer, or refuses them", "[gpu]") {
  if (gpu::device_count() == 0) {
    WARN("no GPU: skipped");
    return;
  }
  auto staged = gpu::NcclImplementation::create(0, 1, 0, share_alone, gpu::HostBuffers::stage);
  REQUIRE(staged.ok());
  // Odd sizes and an empty one, packed end to end on the device and unpacked again: a wrong
  // offset would show as values moved between tensors. The second round is larger (the
  // staging buffer grows).
  for (size_t scale : {1u, 300u}) {
    std::vector<std::vector<float>> tensors{
        std::vector<float>(5 * scale), {}, std::vector<float>(4097 * scale), {42.0f}};
    float next = 1.0f;
    for (auto& t : tensors)
      for (auto& x : t)
        x = next++;
    const auto want = tensors;
    collective::AllReduceOptions o;
    for (auto& t : tensors)
      o.inputs.push_back({t.data(), t.size()});
    o.memory = collective::Memory::host;
    o.reduction = collective::Reduction::mean;
    o.tag = "staged";
    REQUIRE((*staged)->enabled(o));
    REQUIRE((*staged)->all_reduce(o).ok());
    CHECK(tensors == want);  // one rank: the mean is its own values
  }
  auto refusing = gpu::NcclImplementation::create(0, 1, 0, share_alone);
  REQUIRE(refusing.ok());
  std::vector<float> h(3, 1.0f);
  collective::AllReduceOptions o;
  o.inputs = {{h.data(), h.size()}};
  o.tag = "host";
  CHECK_FALSE((*refusing)->enabled(o));
  auto st = (*refusing)->all_reduce(o);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == core::Errc::invalid_argument);
  CHECK_THAT(st.error().message, Catch::Contains("'host'") && Catch::Contains("staging is off"));
}

// NCCL refuses two ranks of one communicator on the same GPU ("Duplicate GPU detected",
// seen with NCCL 2.28 on one H100): the two-rank cases need two GPUs.
bool two_gpus() {
  if (gpu::device_count() >= 2) return true;
  WARN(gpu::device_count() << " GPU(s): NCCL needs a GPU per rank, two-rank case skipped");
  return false;
}

TEST_CASE("NCCL all-reduce across two ranks equals the serial sum and mean", "[gpu]") {
  if (!two_gpus()) return;
  auto ranks = two_ranks();
  REQUIRE(ranks[0].ok());
  REQUIRE(ranks[1].ok());
  // Sizes with and without remainders, an empty tensor among them; integer-valued floats
  // so that the sum is exact whatever order NCCL adds in.
  const std::vector<size_t> sizes{0, 1, 3, 4097, (1u << 20) + 3};
  for (auto reduction : {collective::Reduction::sum, collective::Reduction::mean}) {
    std::vector<std::vector<std::vector<float>>> host(2), got(2);
    std::vector<core::Status> status(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        auto stream = gpu::Stream::create(r);
        if (!stream) {
          status[r] = stream.error();
          return;
        }
        std::vector<gpu::DeviceBuffer> buffers;
        collective::AllReduceOptions o;
        for (size_t n : sizes) {
          std::vector<float> h(n);
          for (size_t i = 0; i < n; ++i)
            h[i] = float((i * 7 + size_t(r) * 3) % 1000);
          auto b = gpu::DeviceBuffer::create(r, n);
          if (!b) {
            status[r] = b.error();
            return;
          }
          if (auto st = b->upload(h.data(), n, *stream); !st) {
            status[r] = st;
            return;
          }
          o.inputs.push_back({b->data(), n});
          buffers.push_back(std::move(*b));
          host[r].push_back(std::move(h));
        }
        o.memory = collective::Memory::device;
        o.reduction = reduction;
        o.tag = "two-ranks";
        o.timeout = std::chrono::milliseconds(30000);
        status[r] = (*ranks[r])->all_reduce(o);
        for (size_t k = 0; k < sizes.size() && status[r]; ++k) {
          got[r].emplace_back(sizes[k]);
          status[r] = buffers[k].download(got[r][k].data(), sizes[k], *stream);
        }
      });
    for (auto& t : threads)
      t.join();
    REQUIRE(status[0].ok());
    REQUIRE(status[1].ok());
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::vector<float> want(sizes[k]);
      for (size_t i = 0; i < sizes[k]; ++i) {
        want[i] = host[0][k][i] + host[1][k][i];
        if (reduction == collective::Reduction::mean) want[i] /= 2.0f;
      }
      INFO("size " << sizes[k]);
      CHECK(got[0][k] == want);
      CHECK(got[1][k] == want);
    }
  }
}

TEST_CASE("NCCL names the tag when a rank never submits, and aborts", "[gpu]") {
  if (!two_gpus()) return;
  auto ranks = two_ranks();
  REQUIRE(ranks[0].ok());
  REQUIRE(ranks[1].ok());
  auto buffer = gpu::DeviceBuffer::create(0, 1024);
  REQUIRE(buffer.ok());
  collective::AllReduceOptions o;
  o.inputs = {{buffer->data(), buffer->count()}};
  o.memory = collective::Memory::device;
  o.tag = "layer3/kernel";
  o.timeout = std::chrono::milliseconds(300);
  // Rank 1 holds its communicator but never calls.
  auto st = (*ranks[0])->all_reduce(o);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == core::Errc::unavailable);
  CHECK_THAT(st.error().message, Catch::Contains("layer3/kernel") && Catch::Contains("300 ms"));
  CHECK_FALSE((*ranks[0])->enabled(o));
  auto again = (*ranks[0])->all_reduce(o);
  REQUIRE_FALSE(again.ok());
  CHECK_THAT(again.error().message, Catch::Contains("aborted"));
  (*ranks[1])->abort();  // the peer learns of the loss and leaves without waiting
  CHECK_FALSE((*ranks[1])->enabled(o));
}
