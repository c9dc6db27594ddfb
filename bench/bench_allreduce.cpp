// Ring all-reduce latency and bandwidth across processes, next to a raw TCP loopback
// transfer of the same bytes measured in the same run:
//
//   build/bin/troupe launch --workers 2 -- build/bin/bench_allreduce
//
// Every chief and worker task is a rank (a chief first, then the workers: with no PS
// tasks launch makes workers only, worker 0 the chief, as in TensorFlow's
// MultiWorkerMirroredStrategy); each forms the ring on its TF_CONFIG address. Rank 0 prints
// one JSON line per size: lat_us_median (one all-reduce, median over iterations),
// algbw_GBps (size / latency), and the raw TCP baseline (one-way transfer of the same
// size between two threads, with acknowledgement) with the ratio; then a summary line.
#include <chrono>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/collective/ring.hpp"
#include "bench_stats.hpp"
#include "core/json_text.hpp"
#include "examples/command_line.hpp"
#include "net/auth.hpp"
#include "net/cluster_spec.hpp"
#include "tcp_baseline.hpp"

using namespace troupe;
using clock_type = std::chrono::steady_clock;

namespace {

int fail(const std::string& what) {
  std::cerr << "bench_allreduce: " << what << std::endl;
  std::cout << troupe::core::json_text(
                   nlohmann::json{{"ok", false}, {"program", "bench_allreduce"}, {"error", what}})
            << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ring all-reduce benchmark (run under troupe launch --workers N)"};
  std::vector<size_t> sizes{1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  double seconds_per_size = 1.0;
  app.add_option("--sizes", sizes, "bytes per all-reduce");
  app.add_option("--seconds", seconds_per_size, "time spent on each size (at least 5 rounds)");
  std::string transport = "auto";
  app.add_option("--transport", transport,
                 "auto: shared memory between ranks on one host; tcp: TCP throughout")
      ->check(CLI::IsMember({"auto", "tcp"}));
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "bench_allreduce"))
    return *end;

  auto resolver = net::TFConfigClusterResolver::from_env();
  if (!resolver) return fail(resolver.error().to_string());
  const auto& spec = resolver->cluster_spec();
  const auto me = resolver->task();
  std::vector<std::string> addresses;
  int rank = -1;
  for (const char* job : {"chief", "worker"})
    for (int i = 0; i < spec.num_tasks(job); ++i) {
      if (me.type == job && me.index == i) rank = static_cast<int>(addresses.size());
      addresses.push_back(spec.address({job, i}));
    }
  if (rank < 0) {  // a PS or evaluator task has no part in it
    std::cout << troupe::core::json_text(nlohmann::json{{"ok", true}, {"task", me.to_string()}})
              << std::endl;
    return 0;
  }
  collective::RingOptions o;
  o.group_id = 0x5452414c4c524544ull;
  o.shared_memory = transport == "auto";
  auto secret = net::cluster_secret_from_env();  // under troupe launch, the job's
  if (!secret) return fail(secret.error().to_string());
  o.secret = std::move(*secret);
  auto ring = collective::Ring::form(rank, addresses, o);
  if (!ring) return fail(ring.error().to_string());
  collective::Ring& r = **ring;
  float token = 0.0f;
  auto barrier = [&](const std::string& tag) {
    return r.all_reduce(&token, 1, collective::Reduction::sum, tag);
  };

  // First, correctness across the processes: integer-valued data (every summation order
  // gives the same floats) of a size no rank count divides, against the serial sum.
  const size_t check_n = 100003;
  std::vector<float> check(check_n);
  auto value = [](int k, size_t i) {
    return static_cast<float>(static_cast<int>((i + 7 * k) % 17) - 8);
  };
  for (size_t i = 0; i < check_n; ++i)
    check[i] = value(rank, i);
  if (auto st = r.all_reduce(check.data(), check_n, collective::Reduction::sum, "check"); !st)
    return fail(st.error().to_string());
  size_t wrong = 0;
  for (size_t i = 0; i < check_n; ++i) {
    float expected = 0.0f;
    for (int k = 0; k < r.size(); ++k)
      expected += value(k, i);
    wrong += check[i] != expected;
  }
  if (wrong != 0) return fail(std::to_string(wrong) + " wrong sums in the check");

  std::optional<bench::TcpBaseline> tcp;
  if (rank == 0) tcp.emplace();
  nlohmann::json summary = nlohmann::json::array();
  for (size_t bytes : sizes) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    // Warm up, then agree on a round count from rank 0's estimate (every rank must run
    // the same number of collectives).
    for (int i = 0; i < 3; ++i)
      if (auto st = r.all_reduce(data.data(), data.size(), collective::Reduction::sum, "warm"); !st)
        return fail(st.error().to_string());
    const auto t0 = clock_type::now();
    if (auto st = r.all_reduce(data.data(), data.size(), collective::Reduction::sum, "probe"); !st)
      return fail(st.error().to_string());
    float rounds = static_cast<float>(
        std::clamp(seconds_per_size / std::chrono::duration<double>(clock_type::now() - t0).count(),
                   5.0, 20000.0));
    if (rank != 0) rounds = 0.0f;
    if (auto st = r.all_reduce(&rounds, 1, collective::Reduction::sum, "rounds"); !st)
      return fail(st.error().to_string());
    std::vector<double> lat;
    for (int i = 0; i < static_cast<int>(rounds); ++i) {
      const auto s = clock_type::now();
      if (auto st = r.all_reduce(data.data(), data.size(), collective::Reduction::sum, "t"); !st)
        return fail(st.error().to_string());
      lat.push_back(std::chrono::duration<double>(clock_type::now() - s).count());
    }
    // The baseline while the other ranks wait at the barrier: the machine is quiet.
    std::vector<double> base;
    if (rank == 0)
      for (int i = 0; i < std::min(static_cast<int>(rounds), 200); ++i)
        base.push_back(tcp->push(bytes));
    if (auto st = barrier("after " + std::to_string(bytes)); !st)
      return fail(st.error().to_string());
    if (rank != 0) continue;
    const double m = bench::median(lat), b = bench::median(base);
    nlohmann::json line{{"bench", "allreduce"},
                        {"ranks", r.size()},
                        {"bytes", bytes},
                        {"rounds", lat.size()},
                        {"lat_us_median", m * 1e6},
                        {"algbw_GBps", static_cast<double>(bytes) / m / 1e9},
                        {"tcp_oneway_us_median", b * 1e6},
                        {"tcp_GBps", static_cast<double>(bytes) / b / 1e9},
                        {"time_vs_tcp", m / b}};
    std::cout << troupe::core::json_text(line) << std::endl;
    summary.push_back({{"bytes", bytes}, {"lat_us_median", m * 1e6}, {"time_vs_tcp", m / b}});
  }
  if (rank == 0)
    std::cout << troupe::core::json_text(
                     nlohmann::json{{"ok", true},
                                    {"program", "bench_allreduce"},
                                    {"ranks", r.size()},
                                    {"shared_memory_links", r.stats().shared_memory_links},
                                    {"checked_exact", check_n},
                                    {"sizes", summary}})
              << std::endl;
  else
    std::cout << troupe::core::json_text(nlohmann::json{{"ok", true}, {"task", me.to_string()}})
              << std::endl;
  return 0;
}
