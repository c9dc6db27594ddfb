// A mirrored step's collectives on the strategy's engine, replicas as threads of this
// process on loopback: gradients reduced bucket by bucket during the backward pass reach
// exactly the weights of one reduction after it; a replica that never comes fails every
// other replica's step with a report naming it; a gradient marked twice is an error.
#include <future>
#include <mutex>

#include <catch2/catch.hpp>

#include "core/fake_device.hpp"
#include "core/keras/classifier_graph.hpp"
#include "core/keras/classifier_trainer.hpp"
#include "core/optimizer.hpp"
#include "helpers.hpp"
#include "process.hpp"
#include "troupe/mirrored_strategy.hpp"

using namespace troupe;

namespace {

struct Replica {
  std::vector<float> weights;
  MirroredStats stats;
  std::string error;  // empty: every step ran
};

// Trains `steps` SGD steps of a 20-64-64-3 MLP on each replica's own synthetic batch;
// `overlap`: BucketedAllReduce during the backward pass, else one all_reduce after it.
// Replica `absent` (if any) joins but never runs a step and stays until the others end.
// `on_device`: replica i computes on (fake) device cuda:i.
std::vector<Replica> train(int n, bool overlap, int steps, int absent = -1, MirroredOptions mo = {},
                           bool on_device = false) {
  const auto addresses = test::loopback_addresses(n);
  mo.connect_timeout = std::chrono::seconds(20);
  std::promise<void> others_done;
  auto done = others_done.get_future().share();
  std::mutex mu;
  int ended = 0;
  std::vector<std::future<Replica>> futures;
  for (int i = 0; i < n; ++i)
    futures.push_back(std::async(std::launch::async, [&, i] {
      Replica r;
      auto finish = [&] {
        std::lock_guard<std::mutex> lock(mu);
        if (++ended == n - (absent >= 0 ? 1 : 0)) others_done.set_value();
      };
      net::SimpleClusterResolver resolver(net::ClusterSpec({{"worker", addresses}}),
                                          net::TaskId{"worker", i});
      const core::Device device = on_device ? core::Device::cuda(i) : core::Device::cpu();
      MirroredOptions options = mo;
      options.device = device;
      auto made = MultiWorkerMirroredStrategy::make(resolver, options);
      if (!made) {
        r.error = made.error().to_string();
        if (i != absent) finish();
        return r;
      }
      auto& strategy = **made;
      if (i == absent) {  // stays (its ring open, answering) until the others have ended
        (void)done.wait_for(std::chrono::seconds(30));
        return r;
      }
      auto model = core::keras::ClassifierGraph::make({false, {20, 64, 64, 3}, 5, true}).value();
      if (auto st = model->to(device); !st) {
        r.error = st.error().to_string();
        finish();
        return r;
      }
      auto sgd = core::make_optimizer("sgd", 0.05f).value();
      core::keras::ClassifierTrainer trainer(*model, *sgd);
      std::vector<collective::Buffer> grads;
      for (auto& p : trainer.parameters())
        grads.push_back({p.grad->data(), static_cast<size_t>(p.grad->size()), device});
      core::Tensor x(core::Shape{8, 20});
      int32_t labels[8];
      while (strategy.step() < steps && r.error.empty()) {
        const auto s = strategy.step();
        for (int64_t k = 0; k < x.size(); ++k)
          x.data()[k] = static_cast<float>((k * 7 + i * 13 + s * 3) % 17) / 17.0f - 0.5f;
        for (int k = 0; k < 8; ++k)
          labels[k] = (k + i + static_cast<int>(s)) % 3;
        auto outcome = strategy.run([&](ReplicaContext& ctx) -> core::Status {
          if (!overlap) {
            if (auto l = trainer.compute_gradients(x, labels); !l) return l.error();
            if (auto st = ctx.all_reduce(ReduceOp::mean, grads); !st) return st;
            return trainer.apply_gradients();
          }
          BucketedAllReduce reduce(ctx, ReduceOp::mean, grads);
          auto l = trainer.compute_gradients(x, labels, [&](size_t g) { reduce.ready(g); });
          if (!l) return l.error();
          if (auto st = reduce.finish(); !st) return st;
          return trainer.apply_gradients();
        });
        if (!outcome) r.error = outcome.error().to_string();
      }
      for (auto& p : trainer.parameters()) {
        const core::Tensor w = p.value->to(core::Device::cpu());
        r.weights.insert(r.weights.end(), w.data(), w.data() + w.size());
      }
      r.stats = strategy.stats();
      finish();
      return r;
    }));
  std::vector<Replica> out;
  for (auto& f : futures)
    out.push_back(f.get());
  return out;
}

}  // namespace

TEST_CASE("gradients reduced bucket by bucket during the backward pass give the same weights",
          "[mirrored][buckets]") {
  MirroredOptions mo;
  // 64x64 floats are 16 KiB: each layer's gradients fill a bucket of their own.
  mo.bytes_per_pack = 8 << 10;
  const auto after = train(2, /*overlap=*/false, 12, -1, mo);
  const auto during = train(2, /*overlap=*/true, 12, -1, mo);
  for (const auto& r : {after[0], after[1], during[0], during[1]})
    REQUIRE(r.error.empty());
  // The replicas agree, and reducing in buckets changes no bit of the result.
  CHECK(after[0].weights == after[1].weights);
  CHECK(during[0].weights == during[1].weights);
  CHECK(during[0].weights == after[0].weights);
  // During: each step's last two layers' gradients (16.8 KiB, over the 8 KiB pack) went
  // to the engine's thread as one bucket while the first layer's backward ran; the first
  // layer's were reduced on the step's thread. After: everything on the step's thread.
  CHECK(during[0].stats.collectives_submitted == 12);
  CHECK(during[0].stats.collectives_called == 12);
  CHECK(after[0].stats.collectives_submitted == 0);
  CHECK(after[0].stats.collectives_called == 12);
}

TEST_CASE("a replica that never runs its step fails the others' steps naming it",
          "[mirrored][buckets][stall]") {
  MirroredOptions mo;
  mo.bytes_per_pack = 8 << 10;
  mo.timeout = std::chrono::milliseconds(500);
  const auto runs = train(3, /*overlap=*/true, 3, /*absent=*/2, mo);
  // Replica 0 waits on replica 2 (its left neighbour): its report is the stall's and names
  // every rank; replica 1 waits on replica 0 and may see it give up first (then, already
  // gone, it may not answer replica 0's question: "Missing: ranks 1 (no answer), 2.").
  CAPTURE(runs[0].error, runs[1].error);
  CHECK_THAT(runs[0].error, Catch::StartsWith("unavailable"));
  CHECK_THAT(runs[0].error, Catch::Contains("Missing: ranks ") && Catch::EndsWith(" 2."));
  CHECK_THAT(runs[0].error, Catch::Contains("rank 2 (slot 2): has not submitted it"));
  CHECK_THAT(runs[1].error, Catch::StartsWith("unavailable"));
}

TEST_CASE("a gradient marked ready twice is an error of finish()", "[mirrored][buckets]") {
  const auto addresses = test::loopback_addresses(1);
  net::SimpleClusterResolver resolver(net::ClusterSpec({{"worker", addresses}}),
                                      net::TaskId{"worker", 0});
  auto strategy = MultiWorkerMirroredStrategy::make(resolver).value();
  std::vector<float> a(4, 1.0f), b(4, 2.0f);
  auto outcome = strategy->run([&](ReplicaContext& ctx) -> core::Status {
    BucketedAllReduce reduce(ctx, ReduceOp::sum, {{a.data(), a.size()}, {b.data(), b.size()}});
    reduce.ready(1);
    reduce.ready(1);
    reduce.ready(7);
    return reduce.finish();
  });
  REQUIRE_FALSE(outcome.ok());
  CHECK(outcome.error().code == core::Errc::invalid_argument);
  CHECK_THAT(outcome.error().message, Catch::Contains("gradient 1 of 2 was marked ready twice"));
}

TEST_CASE("models on devices train as on the CPU: buckets through host memory by the ring",
          "[mirrored][buckets][device]") {
  // Two fake devices (host memory tagged cuda:0 and cuda:1, the CPU's kernels): the
  // device path of a mirrored step without NCCL, copied out to host memory and back.
  test::FakeCuda fake(2);
  MirroredOptions mo;
  mo.bytes_per_pack = 8 << 10;
  const auto cpu = train(2, /*overlap=*/true, 6, -1, mo);
  const auto dev = train(2, /*overlap=*/true, 6, -1, mo, /*on_device=*/true);
  for (const auto& r : {cpu[0], cpu[1], dev[0], dev[1]}) {
    INFO(r.error);
    REQUIRE(r.error.empty());
  }
  CHECK(dev[0].weights == dev[1].weights);
  CHECK(dev[0].weights == cpu[0].weights);
  CHECK(dev[0].stats.collectives_submitted == 6);  // a bucket a step on the engine's thread
  CHECK(fake.fake(0).transfers > 0);
  CHECK(fake.fake(1).transfers > 0);
}
