#include "troupe/mirrored_strategy.hpp"

#include <filesystem>
#include <iostream>

#include "actors/collective/elastic_ring.hpp"
#include "actors/collective/ring_implementation.hpp"
#include "api/mirrored_impl.hpp"
#include "api/staged_all_reduce.hpp"
#include "net/auth.hpp"
#ifdef TROUPE_WITH_NCCL
#include <unistd.h>

#include <cstring>
#include <set>

#include "gpu/module.hpp"
#endif

namespace troupe {

using core::Errc;
using core::make_error;

namespace {

// Tells this job's ring connections from another job's on the same ports.
uint64_t group_id_of(const std::vector<std::string>& addresses) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the member addresses
  for (const auto& a : addresses)
    for (unsigned char c : a + ";") {
      h ^= c;
      h *= 1099511628211ull;
    }
  return h;
}

std::string slots_text(const std::vector<int>& slots) {
  std::string s;
  for (int x : slots)
    s += (s.empty() ? "" : ",") + std::to_string(x);
  return "[" + s + "]";
}

#ifdef TROUPE_WITH_NCCL
// NCCL for the strategy: a communicator per ring generation, made at the first all-reduce
// of a generation (every member reaches it at the same step, joiners included), rank 0's
// id handed round by the ring's broadcast. The models live on the CPU, so the host
// gradients are staged through device memory.
class MirroredNccl final : public collective::Implementation {
 public:
  /// `use` says whether NCCL takes device buffers under communication=auto (every worker
  /// has a GPU of its own); with communication=nccl it takes everything.
  MirroredNccl(const gpu::ModuleApi& gpu, std::function<collective::ElasticRing&()> ring,
               int device, std::shared_ptr<bool> use)
      : gpu_(gpu), ring_(std::move(ring)), device_(device), use_(std::move(use)) {}
  collective::Communication kind() const override { return collective::Communication::nccl; }
  const char* name() const override { return "nccl"; }
  bool enabled(const collective::AllReduceOptions& o) const override {
    return *use_ && o.wire == core::DType::float32;  // bfloat16 on the wire: the ring's
  }
  core::Status all_reduce(const collective::AllReduceOptions& o) override {
    auto& group = ring_();
    const uint64_t generation = group.membership().generation;
    if (!current_ || generation != generation_) {
      if (current_) gpu_.abort_nccl(*current_);  // after a loss a destroy could wait on the lost
      current_.reset();
      auto& ring = group.ring();
      const std::string tag = "nccl id " + std::to_string(generation);
      auto made = gpu_.make_nccl(ring.rank(), ring.size(), device_, [&](char* bytes, size_t n) {
        std::vector<float> words((n + sizeof(float) - 1) / sizeof(float));
        std::memcpy(words.data(), bytes, n);
        auto st = ring.broadcast(words.data(), words.size(), 0, tag);
        std::memcpy(bytes, words.data(), n);
        return st;
      });
      if (!made)
        return make_error(made.error().code,
                          "NCCL communicator for generation " + std::to_string(generation) +
                              " on GPU " + std::to_string(device_) +
                              " (NCCL needs a GPU per worker: " + std::to_string(ring.size()) +
                              " workers, this one sees " + std::to_string(gpu_.device_count()) +
                              "): " + made.error().message);
      current_ = std::move(*made);
      generation_ = generation;
    }
    return current_->all_reduce(o);
  }

 private:
  const gpu::ModuleApi& gpu_;
  std::function<collective::ElasticRing&()> ring_;
  int device_;
  std::shared_ptr<bool> use_;
  std::unique_ptr<collective::Implementation> current_;
  uint64_t generation_ = 0;
};

// Whether every rank computes on a GPU of its own: each puts a hash of its host and its
// GPU's PCI bus id into its slot of a vector the ring sums (an all-gather); NCCL refuses
// two ranks on one GPU.
core::Expected<bool> distinct_gpus(const gpu::ModuleApi& gpu, collective::Ring& ring, int device) {
  char bus[64] = {};
  if (!gpu.pci_bus_id(device, bus, sizeof bus)) return false;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  uint64_t h = 1469598103934665603ull;
  for (const char* p : {static_cast<const char*>(host), "/", static_cast<const char*>(bus)})
    for (; *p != 0; ++p) {
      h ^= static_cast<unsigned char>(*p);
      h *= 1099511628211ull;
    }
  // Three 16-bit pieces per rank: exact in float32.
  std::vector<float> ids(static_cast<size_t>(3 * ring.size()), 0.0f);
  for (int k = 0; k < 3; ++k)
    ids[static_cast<size_t>(3 * ring.rank() + k)] = static_cast<float>((h >> (16 * k)) & 0xffff);
  if (auto st =
          ring.all_reduce({{ids.data(), ids.size()}}, collective::Reduction::sum, "gpu identities");
      !st)
    return st.error();
  std::set<std::vector<float>> seen;
  for (int r = 0; r < ring.size(); ++r)
    if (!seen.insert({ids.begin() + 3 * r, ids.begin() + 3 * r + 3}).second) return false;
  return true;
}
#endif

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() = default;

core::Expected<std::unique_ptr<MultiWorkerMirroredStrategy>> MultiWorkerMirroredStrategy::make(
    const net::ClusterResolver& resolver, MirroredOptions options) {
  const auto& spec = resolver.cluster_spec();
  const auto me = resolver.task();
  std::vector<std::string> addresses;
  int slot = -1;
  for (const char* job : {"chief", "worker"})
    for (int i = 0; i < spec.num_tasks(job); ++i) {
      if (me.type == job && me.index == i) slot = static_cast<int>(addresses.size());
      addresses.push_back(spec.address({job, i}));
    }
  if (slot < 0)
    return make_error(Errc::invalid_argument,
                      "task " + me.to_string() +
                          " has no replica in a MultiWorkerMirroredStrategy (only chief and "
                          "worker tasks do)");
  if (options.min_workers < 1 || options.min_workers > static_cast<int>(addresses.size()))
    return make_error(Errc::invalid_argument, "min_workers " + std::to_string(options.min_workers) +
                                                  " of " + std::to_string(addresses.size()) +
                                                  " workers");
  if (options.gradient_wire != core::DType::float32 &&
      options.gradient_wire != core::DType::bfloat16)
    return make_error(Errc::invalid_argument, std::string("gradient_wire ") +
                                                  core::dtype_name(options.gradient_wire) +
                                                  ": gradients travel as float32 or bfloat16");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->options.stop = nullptr;  // for start-up only: it may point into the caller's frame
  impl->slot = slot;

  collective::ElasticOptions eo;
  eo.ring.connect_timeout = options.connect_timeout;
  eo.ring.timeout = options.timeout;
  eo.ring.fusion_bytes = options.bytes_per_pack;
  eo.ring.shared_memory = options.shared_memory;
  eo.ring.group_id = group_id_of(addresses);
  auto secret = net::cluster_secret_from_env();
  if (!secret)
    return make_error(secret.error().code,
                      "task " + me.to_string() + ": " + secret.error().message);
  eo.ring.secret = std::move(*secret);
  eo.rejoin_timeout = options.rejoin_timeout;
  eo.min_ranks = options.elastic ? options.min_workers : static_cast<int>(addresses.size());
  eo.stop = options.stop;

  // The implementations in order of preference: NCCL first where it is built and asked
  // for, then the CPU ring.
  std::vector<std::unique_ptr<collective::Implementation>> impls;
  Impl* raw = impl.get();
  [[maybe_unused]] const bool on_gpu = options.device.is_cuda();
#ifdef TROUPE_WITH_NCCL
  auto use_nccl = std::make_shared<bool>(options.communication == collective::Communication::nccl);
  int nccl_device = -1;
  const bool nccl_asked = options.communication == collective::Communication::nccl;
  // The GPU module is loaded only here: a model on the CPU without nccl asked for maps none
  // of CUDA's libraries.
  const gpu::ModuleApi* gpu_module = nullptr;
  if (nccl_asked || on_gpu) {
    auto module = gpu::load_module();
    if (!module && nccl_asked)
      return make_error(module.error().code, "MultiWorkerMirroredStrategy: communication=nccl: " +
                                                 module.error().message);
    if (module) gpu_module = *module;
  }
  if (gpu_module != nullptr && (nccl_asked || gpu_module->device_count() > 0)) {
    const int gpus = gpu_module->device_count();
    if (gpus == 0)
      return make_error(Errc::unavailable,
                        "MultiWorkerMirroredStrategy: communication=nccl but task " +
                            me.to_string() + " sees no GPU");
    nccl_device = options.gpu_device >= 0 ? options.gpu_device
                                          : (on_gpu ? options.device.index : slot % gpus);
    if (nccl_device >= gpus)
      return make_error(Errc::invalid_argument, "MultiWorkerMirroredStrategy: gpu_device " +
                                                    std::to_string(nccl_device) + " of " +
                                                    std::to_string(gpus) + " GPUs");
    impls.push_back(std::make_unique<MirroredNccl>(
        *gpu_module, [raw]() -> collective::ElasticRing& { return *raw->ring; }, nccl_device,
        use_nccl));
  }
#endif
  // A model on a device without NCCL: its buffers through host memory, by the ring.
  auto ring_impl = std::make_shared<collective::RingImplementation>(
      [raw]() -> collective::Ring& { return raw->ring->ring(); });
  impls.push_back(std::make_unique<HostStagedAllReduce>(
      [ring_impl]() -> collective::Implementation& { return *ring_impl; }));
  impls.push_back(std::make_unique<collective::RingImplementation>(
      [raw]() -> collective::Ring& { return raw->ring->ring(); }));
  impl->group = std::make_unique<collective::Group>(slot, static_cast<int>(addresses.size()),
                                                    options.communication, std::move(impls));
  bool any = false;
  for (const auto& i : impl->group->implementations())
    any = any || options.communication == collective::Communication::automatic ||
          i->kind() == options.communication;
  if (!any)
    return make_error(Errc::unavailable,
                      std::string("MultiWorkerMirroredStrategy: communication=") +
                          collective::to_string(options.communication) +
                          " but no such implementation is built here");

  auto ring = collective::ElasticRing::join(slot, addresses, eo, 0, /*has_state=*/false);
  if (!ring) return ring.error();
  impl->ring = std::move(*ring);
#ifdef TROUPE_WITH_NCCL
  // auto on GPUs: NCCL if no two workers share a GPU (every rank learns the same answer;
  // a joiner in elastic mode cannot ask, so elastic jobs keep the ring unless told nccl).
  if (nccl_device >= 0 && options.communication == collective::Communication::automatic &&
      !options.elastic) {
    auto distinct = distinct_gpus(*gpu_module, impl->ring->ring(), nccl_device);
    if (!distinct) return distinct.error();
    *use_nccl = *distinct;
  }
#endif
  return std::unique_ptr<MultiWorkerMirroredStrategy>(
      new MultiWorkerMirroredStrategy(std::move(impl)));
}

int MultiWorkerMirroredStrategy::num_replicas_in_sync() const {
  return impl_->ring->size();
}

int MultiWorkerMirroredStrategy::worker_index() const {
  return impl_->ring->rank();
}

core::DType MultiWorkerMirroredStrategy::gradient_wire() const {
  return impl_->options.gradient_wire;
}

MirroredStats MultiWorkerMirroredStrategy::stats() const {
  MirroredStats s = stats_;
  s.shared_memory_links = impl_->ring->ring().stats().shared_memory_links;
  s.tls_links = impl_->ring->ring().stats().tls_links;
  s.ring_bytes_sent = impl_->ring->ring().stats().bytes_sent;
  const auto e = impl_->engine.stats();
  s.collectives_submitted = e.submitted;
  s.collectives_called = e.called;
  return s;
}

bool MultiWorkerMirroredStrategy::is_chief() const {
  return impl_->slot == 0;
}

uint64_t MultiWorkerMirroredStrategy::generation() const {
  return impl_->ring->membership().generation;
}

core::InputContext MultiWorkerMirroredStrategy::input_context() const {
  core::InputContext ctx;
  ctx.num_input_pipelines = num_replicas_in_sync();
  ctx.input_pipeline_id = worker_index();
  ctx.num_replicas_in_sync = num_replicas_in_sync();
  return ctx;
}

core::Status MultiWorkerMirroredStrategy::broadcast_state(int root) {
  // The same tags whether this process started with the job or joined it later: a
  // joiner's first broadcast meets the members' broadcast after a re-forming.
  const auto& m = impl_->ring->membership();
  for (size_t i = 0; i < impl_->state.size(); ++i) {
    const std::string tag = "state " + std::to_string(m.generation) + "/" + std::to_string(i);
    const auto& b = impl_->state[i];
    if (b.device.is_cpu()) {
      if (auto st = impl_->now(
              tag, [&] { return impl_->ring->ring().broadcast(b.data, b.count, root, tag); });
          !st)
        return st;
      continue;
    }
    // State on a device goes through host memory (once at the start and after re-forming).
    auto backend = core::backend_for(b.device);
    if (!backend) return backend.error();
    std::vector<float> host(b.count);
    (*backend)->copy(host.data(), core::Device::cpu(), b.data, b.device, b.count * sizeof(float));
    if (auto st = impl_->now(
            tag, [&] { return impl_->ring->ring().broadcast(host.data(), b.count, root, tag); });
        !st)
      return st;
    (*backend)->copy(b.data, b.device, host.data(), core::Device::cpu(), b.count * sizeof(float));
    if (auto st = (*backend)->synchronize(); !st) return st;
  }
  return {};
}

core::Status MultiWorkerMirroredStrategy::mirror(std::vector<collective::Buffer> state) {
  impl_->state = std::move(state);
  if (impl_->state.empty()) return {};  // mirroring ends; nothing to send
  // A process's first mirror() meets the others' first one (a new job: the root is the
  // chief) or, in a joiner, the members' broadcast after taking it in (the root's state).
  // Later calls, every member at once (a second fit()), take the chief's: rank 0.
  const auto& m = impl_->ring->membership();
  const bool first = !impl_->mirrored_before;
  impl_->mirrored_before = true;
  if (auto st = broadcast_state(first ? m.root : 0); !st) return st;
  if (first) step_ = m.step;
  return {};
}

MirroredDataset MultiWorkerMirroredStrategy::distribute_datasets_from_function(
    MirroredDataset::Function fn) {
  return MirroredDataset(*this, std::move(fn));
}

core::Status MultiWorkerMirroredStrategy::reform(bool after_failure, bool admit) {
  auto& group = *impl_->ring;
  // Nothing of the old ring may still run; its failure is what brought us here.
  (void)impl_->engine.drain();
  core::Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto m = group.reform(step_, admit);
    if (!m) return m.error();
    // Everyone takes the state of the member with the most steps done.
    last = broadcast_state(m->root);
    if (!last) continue;  // someone else was lost meanwhile
    step_ = m->step;
    ++stats_.reforms;
    stats_.workers_lost += static_cast<int64_t>(m->lost.size());
    stats_.workers_joined += static_cast<int64_t>(m->joined.size());
    std::cerr << "troupe mirrored: " << (after_failure ? "after a failure, " : "") << "generation "
              << m->generation << " of " << m->slots.size() << " workers " << slots_text(m->slots)
              << " (lost " << slots_text(m->lost) << ", joined " << slots_text(m->joined)
              << "), at step " << m->step << " from worker slot "
              << m->slots[static_cast<size_t>(m->root)] << std::endl;
    return {};
  }
  return last;
}

core::Expected<StepOutcome> MultiWorkerMirroredStrategy::attempt(
    ReplicaContext& ctx, const std::function<core::Status(ReplicaContext&)>& fn, bool admit) {
  auto st = fn(ctx);
  // The step ends with its collectives: a bucket still queued or running is waited for
  // (and one that failed is the step's failure, even if the function did not look).
  if (auto collectives = impl_->engine.drain(); !collectives) {
    ctx.collective_failed_ = true;
    if (st.ok()) st = collectives;
  }
  if (!st) {
    // Only a failed collective is a lost worker; any other error is the function's own.
    if (!ctx.collective_failed_ || !impl_->options.elastic) return st.error();
    if (auto r = reform(/*after_failure=*/true, admit); !r) return r.error();
    return StepOutcome::redo;
  }
  return StepOutcome::done;
}

core::Expected<StepOutcome> MultiWorkerMirroredStrategy::run_collective(
    const std::string& what, const std::function<core::Status(ReplicaContext&)>& fn) {
  ReplicaContext ctx(*this, what);
  return attempt(ctx, fn, /*admit=*/false);
}

core::Expected<StepOutcome> MultiWorkerMirroredStrategy::run(
    const std::function<core::Status(ReplicaContext&)>& step, bool admit) {
  ReplicaContext ctx(*this, "step");
  // A loss mid-step re-forms at the boundary before this step, or after it when a member
  // finished it: `admit` (about the boundary after) holds for both.
  auto outcome = attempt(ctx, step, admit);
  if (!outcome) return outcome;
  if (*outcome == StepOutcome::redo) {
    ++stats_.steps_redone;
    return outcome;
  }
  ++step_;
  if (impl_->options.elastic) {
    // At every step boundary slot 0 says whether a worker waits to join; everyone then
    // re-forms at the same point.
    float waiting = impl_->slot == 0 && admit ? static_cast<float>(impl_->ring->waiting()) : 0.0f;
    const std::string tag = "membership " + std::to_string(step_);
    auto st = impl_->now(tag, [&] {
      return impl_->ring->ring().all_reduce(&waiting, 1, collective::Reduction::sum, tag);
    });
    if (!st || waiting > 0)
      if (auto r = reform(/*after_failure=*/!st, admit); !r) return r.error();
  }
  return StepOutcome::done;
}

core::Expected<double> MultiWorkerMirroredStrategy::reduce(ReduceOp op, double value) {
  float v = static_cast<float>(value);
  const auto reduction =
      op == ReduceOp::mean ? collective::Reduction::mean : collective::Reduction::sum;
  auto st = impl_->now("reduce",
                       [&] { return impl_->ring->ring().all_reduce(&v, 1, reduction, "reduce"); });
  if (!st) return st.error();
  return static_cast<double>(v);
}

std::string MultiWorkerMirroredStrategy::checkpoint_dir(const std::string& base) const {
  if (is_chief()) return base;
  return (std::filesystem::path(base) / ("workertemp_" + std::to_string(impl_->slot))).string();
}

core::Status MultiWorkerMirroredStrategy::remove_temporary_checkpoint_dir(
    const std::string& base) const {
  if (is_chief()) return {};
  std::error_code ec;
  std::filesystem::remove_all(checkpoint_dir(base), ec);
  if (ec) return make_error(Errc::io_error, checkpoint_dir(base) + ": " + ec.message());
  return {};
}

}  // namespace troupe
