// Parameter-server benchmarks, run as a job under the launcher:
//
//   build/bin/troupe launch --ps 1 --workers 2 -- build/bin/bench_ps
//
// The chief prints one JSON line per figure: the schedule-to-fetch rate of trivial
// closures over the workers, PS pull/push throughput per tensor size next to a raw TCP
// loopback transfer of the same bytes measured in the same run, and the chief's and the
// PS's resident memory over many closures that each push a gradient (at-most-once state
// must stay bounded).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_stats.hpp"

#include "api/impl.hpp"
#include "core/json_text.hpp"
#include "net/auth.hpp"
#include "net/channel.hpp"
#include "tcp_baseline.hpp"

#include <random>
#include <unordered_set>
#include "examples/command_line.hpp"
#include "troupe/troupe.hpp"

namespace tc = troupe::core;
using troupe::bench::clock_type;
using troupe::bench::seconds_since;

namespace {

using troupe::bench::median;

int fail(const std::string& what) {
  std::cout << troupe::core::json_text(
                   nlohmann::json{{"ok", false}, {"program", "bench_ps"}, {"error", what}})
            << std::endl;
  return 1;
}

void emit(nlohmann::json j, nlohmann::json& all) {
  std::cout << troupe::core::json_text(j) << std::endl;
  all.push_back(std::move(j));
}

// PS transfers and sparse rows, each next to raw TCP moving the same bytes.
tc::Status transfers(troupe::ParameterServerStrategy& strategy,
                     troupe::ParameterServerStrategy::Impl& impl, int reps, nlohmann::json& all) {
  // 1. PS transfers next to raw TCP, alternating per size so drift hits both: through the
  // tensor channel (what workers use) and as CAF messages (the control plane).
  troupe::bench::TcpBaseline tcp;
  int32_t channel_port = 0;
  (*impl.self)
      ->request(impl.ps[0], std::chrono::seconds(30), troupe::net::channel_atom::value)
      .receive([&](int32_t p) { channel_port = p; }, [](caf::error&) {});
  if (channel_port == 0)
    return tc::make_error(tc::Errc::internal, "ps:0 announces no tensor channel");
  auto ps_host = troupe::net::parse_host_port(impl.spec.address({"ps", 0}));
  if (!ps_host) return ps_host.error();
  auto channel = troupe::net::connect_to(ps_host->host, static_cast<uint16_t>(channel_port),
                                         std::chrono::seconds(30));
  if (!channel) return channel.error();
  // Under troupe launch the PS asks for the job's secret, as it does of every worker, and
  // proves it is the task dialled (ps:0).
  auto secret = troupe::net::cluster_secret_from_env();
  if (!secret) return secret.error();
  if (!secret->empty())
    if (auto st = troupe::net::authenticate_to(*channel, *secret, std::chrono::seconds(30),
                                               troupe::net::links_encrypted(), "ps:0");
        !st)
      return st.error();
  for (int64_t bytes : {int64_t{4} << 10, int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20}) {
    const int64_t n = bytes / 4;
    const std::string var = "t" + std::to_string(bytes);
    const std::string name = var + "#0";  // the PS's key of its only shard
    impl.next_ps = 0;  // placed on ps:0, whose channel this measures (round-robin otherwise)
    auto v = strategy.create_variable(var, tc::Shape{n}, {}, "sgd", 0.0f);
    if (!v) return v.error();
    const troupe::net::WireTensor grad{{n}, std::vector<float>(static_cast<size_t>(n), 0.0f)};
    std::vector<double> pull_s, push_s, caf_pull_s, caf_push_s, tcp_pull_s, tcp_push_s;
    uint64_t id = 1;
    std::string failed;  // the channel's error, where a request failed
    auto over_channel = [&](troupe::net::PsOp op, bool with_grad) {
      troupe::net::PsRequest req{static_cast<uint8_t>(op), id++, {}};
      req.items.push_back({name, {}, with_grad ? grad : troupe::net::WireTensor{}});
      const auto t0 = clock_type::now();
      if (auto st = troupe::net::send_request(*channel, req); !st) {
        failed = st.error().to_string();
        return -1.0;
      }
      if (auto reply = troupe::net::recv_reply(*channel); !reply) {
        failed = reply.error().to_string();
        return -1.0;
      }
      return seconds_since(t0);
    };
    for (int r = 0; r < reps; ++r) {
      pull_s.push_back(over_channel(troupe::net::PsOp::pull, false));
      push_s.push_back(over_channel(troupe::net::PsOp::push, true));
      if (pull_s.back() < 0 || push_s.back() < 0)
        return tc::make_error(tc::Errc::internal,
                              "tensor channel request for " + name + " failed: " + failed);
      bool caf_failed = false;
      auto t0 = clock_type::now();
      (*impl.self)
          ->request(impl.ps[0], std::chrono::seconds(30), troupe::net::pull_atom::value, name)
          .receive([](troupe::net::WireTensor&) {}, [&](caf::error&) { caf_failed = true; });
      caf_pull_s.push_back(seconds_since(t0));
      t0 = clock_type::now();
      (*impl.self)
          ->request(impl.ps[0], std::chrono::seconds(30), troupe::net::push_atom::value, id++, name,
                    grad)
          .receive([](bool) {}, [&](caf::error&) { caf_failed = true; });
      caf_push_s.push_back(seconds_since(t0));
      if (caf_failed)  // an error's round trip is no transfer's time
        return tc::make_error(tc::Errc::internal, "a CAF pull or push of " + name + " failed");
      tcp_pull_s.push_back(tcp.pull(static_cast<uint64_t>(bytes)));
      tcp_push_s.push_back(tcp.push(static_cast<uint64_t>(bytes)));
    }
    const double mib = static_cast<double>(bytes) / (1 << 20);
    const double pull_bw = mib / median(pull_s), push_bw = mib / median(push_s);
    const double caf_pull_bw = mib / median(caf_pull_s), caf_push_bw = mib / median(caf_push_s);
    const double tcp_pull_bw = mib / median(tcp_pull_s), tcp_push_bw = mib / median(tcp_push_s);
    emit({{"bench", "ps_transfer"},
          {"bytes", bytes},
          {"reps", reps},
          {"pull_ms_median", 1e3 * median(pull_s)},
          {"push_ms_median", 1e3 * median(push_s)},
          {"pull_MiBps", pull_bw},
          {"push_MiBps", push_bw},
          {"caf_pull_MiBps", caf_pull_bw},
          {"caf_push_MiBps", caf_push_bw},
          {"tcp_pull_MiBps", tcp_pull_bw},
          {"tcp_push_MiBps", tcp_push_bw},
          {"pull_vs_tcp", pull_bw / tcp_pull_bw},
          {"push_vs_tcp", push_bw / tcp_push_bw},
          {"caf_pull_vs_tcp", caf_pull_bw / tcp_pull_bw},
          {"caf_push_vs_tcp", caf_push_bw / tcp_push_bw}},
         all);
  }

  // 1b. Sparse transfers, as a CTR step makes them: the rows of `unique` random ids of a
  // table pulled, and gradients of those rows pushed, through the tensor channel; next to
  // raw TCP moving the same payload bytes, alternating per size.
  for (int64_t width : {int64_t{16}, int64_t{64}}) {
    const int64_t table_rows = (int64_t{64} << 20) / (4 * width);  // a 64 MiB table
    const std::string var = "table" + std::to_string(width);
    impl.next_ps = 0;  // on ps:0, as above
    auto v = strategy.create_variable(var, tc::Shape{table_rows, width}, {}, "sgd", 0.0f);
    if (!v) return v.error();
    std::mt19937_64 rng(static_cast<uint64_t>(width));
    // A table of the same size in this process: gathering the same rows from it, with
    // nothing sent, is the floor a pull cannot go under (random rows are cache misses).
    const std::vector<float> local(static_cast<size_t>(table_rows * width), 1.0f);
    for (int64_t unique : {int64_t{256}, int64_t{1024}, int64_t{4096}, int64_t{8192}}) {
      std::vector<double> pull_s, push_s, tcp_pull_s, tcp_push_s, gather_s;
      uint64_t id = 1;
      for (int r = 0; r < reps; ++r) {
        std::vector<int64_t> rows;
        std::unordered_set<int64_t> seen;
        while (static_cast<int64_t>(rows.size()) < unique) {
          const auto row = static_cast<int64_t>(rng() % static_cast<uint64_t>(table_rows));
          if (seen.insert(row).second) rows.push_back(row);
        }
        troupe::net::PsRequest pull{static_cast<uint8_t>(troupe::net::PsOp::pull_rows), 0, {}};
        pull.items.push_back({var + "#0", rows, {}});
        auto t0 = clock_type::now();
        if (!troupe::net::send_request(*channel, pull) || !troupe::net::recv_reply(*channel))
          return tc::make_error(tc::Errc::internal, "tensor channel rows pull failed");
        pull_s.push_back(seconds_since(t0));
        troupe::net::PsRequest push{
            static_cast<uint8_t>(troupe::net::PsOp::push_rows), id++ << 16, {}};
        push.items.push_back(
            {var + "#0",
             rows,
             {{unique, width}, std::vector<float>(static_cast<size_t>(unique * width), 0.0f)}});
        t0 = clock_type::now();
        if (!troupe::net::send_request(*channel, push) || !troupe::net::recv_reply(*channel))
          return tc::make_error(tc::Errc::internal, "tensor channel rows push failed");
        push_s.push_back(seconds_since(t0));
        t0 = clock_type::now();
        std::vector<float> gathered(static_cast<size_t>(unique * width));
        for (size_t i = 0; i < rows.size(); ++i)
          std::copy_n(local.data() + rows[i] * width, width,
                      gathered.data() + static_cast<int64_t>(i) * width);
        gather_s.push_back(seconds_since(t0));
        if (gathered[0] != 1.0f) return tc::make_error(tc::Errc::internal, "local gather");
        // The same payload bytes over raw TCP: ids out and rows back; ids and rows out.
        tcp_pull_s.push_back(tcp.pull(static_cast<uint64_t>(unique * (8 + 4 * width))));
        tcp_push_s.push_back(tcp.push(static_cast<uint64_t>(unique * (8 + 4 * width))));
      }
      const double pull_rps = static_cast<double>(unique) / median(pull_s);
      const double push_rps = static_cast<double>(unique) / median(push_s);
      const double tcp_pull_rps = static_cast<double>(unique) / median(tcp_pull_s);
      const double tcp_push_rps = static_cast<double>(unique) / median(tcp_push_s);
      emit({{"bench", "ps_sparse"},
            {"row_floats", width},
            {"unique_rows", unique},
            {"table_rows", table_rows},
            {"reps", reps},
            {"pull_rows_per_sec", pull_rps},
            {"push_rows_per_sec", push_rps},
            {"tcp_pull_rows_per_sec", tcp_pull_rps},
            {"tcp_push_rows_per_sec", tcp_push_rps},
            {"pull_vs_tcp", pull_rps / tcp_pull_rps},
            {"push_vs_tcp", push_rps / tcp_push_rps},
            {"local_gather_us", 1e6 * median(gather_s)},
            // The time a pull would take if the runtime added nothing to the memory's
            // gather and the socket's transfer, over the time it takes.
            {"pull_vs_tcp_plus_gather", (median(tcp_pull_s) + median(gather_s)) / median(pull_s)},
            {"push_vs_tcp_plus_gather", (median(tcp_push_s) + median(gather_s)) / median(push_s)},
            {"pull_us", 1e6 * median(pull_s)},
            {"push_us", 1e6 * median(push_s)},
            {"tcp_pull_us", 1e6 * median(tcp_pull_s)}},
           all);
    }
  }

  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Parameter-server benchmarks (run under troupe launch)"};
  int closures = 20000, rounds = 5, reps = 20, memory_closures = 100000;
  double idle_seconds = 3.0;
  size_t in_flight = troupe::CoordinatorOptions{}.max_in_flight_per_worker;
  std::vector<std::string> sections{"transfers", "closures", "idle", "memory"};
  app.add_option("--closures", closures);
  app.add_option("--rounds", rounds, "repetitions of each closure measurement");
  app.add_option("--reps", reps, "transfers per size and round");
  app.add_option("--in-flight", in_flight, "closures in flight per worker");
  app.add_option("--memory-closures", memory_closures,
                 "pushing closures for the memory figure (0: skip it)");
  app.add_option("--idle-seconds", idle_seconds,
                 "how long the chief's CPU is measured with every worker connected and idle");
  app.add_option("--sections", sections, "which figures to measure")
      ->check(CLI::IsMember({"transfers", "closures", "idle", "memory"}))
      ->delimiter(',');
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "bench_ps")) return *end;

  troupe::Registry registry;
  registry.add_step("noop", [](troupe::StepContext&) { return 0; });
  registry.add_step("push_one", [](troupe::StepContext& ctx) -> tc::Expected<int> {
    const tc::Tensor one(tc::Shape{1}, 1.0f);
    if (auto st = ctx.push({{"mem", one}}); !st) return st.error();
    return 0;
  });
  auto resolver = troupe::net::TFConfigClusterResolver::from_env();
  if (!resolver) {
    std::cout << troupe::core::json_text(
                     nlohmann::json{{"ok", false}, {"error", resolver.error().to_string()}})
              << std::endl;
    return 2;
  }
  if (resolver->task().type != "chief") {
    auto st = troupe::serve(*resolver, registry);
    if (!st) return fail(st.error().to_string());
    std::cout << troupe::core::json_text(nlohmann::json{
                     {"ok", true}, {"program", "bench_ps"}, {"task", resolver->task().to_string()}})
              << std::endl;
    return 0;
  }

  auto strategy = troupe::ParameterServerStrategy::make(*resolver);
  if (!strategy) return fail(strategy.error().to_string());
  nlohmann::json all = nlohmann::json::array();
  const auto wanted = [&](const std::string& s) {
    return std::find(sections.begin(), sections.end(), s) != sections.end();
  };
  auto& impl = (*strategy)->impl();
  if (wanted("transfers"))
    if (auto st = transfers(**strategy, impl, reps, all); !st) return fail(st.error().to_string());

  // 2. Trivial closures over the workers: schedule N, join, fetch.
  troupe::CoordinatorOptions copts;
  copts.max_in_flight_per_worker = in_flight;
  auto coord = troupe::ClusterCoordinator::make(**strategy, copts);
  if (!coord) return fail(coord.error().to_string());
  // Every worker has been reached once and nothing is scheduled: what the chief's links,
  // proxies and heartbeats to them cost it when the job is idle.
  if (wanted("idle")) {
    const double cpu0 = troupe::bench::cpu_seconds();
    const auto t0 = clock_type::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));  // measured span
    const double wall = seconds_since(t0);
    emit({{"bench", "chief_idle"},
          {"workers", (*strategy)->num_workers()},
          {"ps", impl.ps.size()},
          {"seconds", wall},
          {"chief_core_fraction", (troupe::bench::cpu_seconds() - cpu0) / wall}},
         all);
  }
  if (wanted("closures")) {
    std::vector<double> no_result, with_result, cpu_us;
    for (int r = 0; r < rounds; ++r) {
      double cpu0 = troupe::bench::cpu_seconds();
      auto t0 = clock_type::now();
      for (int i = 0; i < closures; ++i)
        (*coord)->schedule_no_result("noop", 1);
      if (auto st = (*coord)->join(); !st) return fail(st.error().to_string());
      no_result.push_back(closures / seconds_since(t0));
      cpu_us.push_back(1e6 * (troupe::bench::cpu_seconds() - cpu0) / closures);
      t0 = clock_type::now();
      std::vector<troupe::RemoteValue<int>> values;
      values.reserve(static_cast<size_t>(closures));
      for (int i = 0; i < closures; ++i)
        values.push_back((*coord)->schedule<int>("noop"));
      for (auto& v : values)
        (void)v.fetch();
      with_result.push_back(closures / seconds_since(t0));
    }
    emit({{"bench", "closures"},
          {"workers", (*strategy)->num_workers()},
          {"closures", closures},
          {"rounds", rounds},
          {"no_result_per_sec_median", median(no_result)},
          {"fetched_per_sec_median", median(with_result)},
          // The chief's whole process (its scheduling thread and CAF's) over the no-result
          // rounds, per closure scheduled to joined.
          {"chief_cpu_us_per_closure_median", median(cpu_us)}},
         all);
  }

  // 3. Memory over many closures that each push to ps:0: the PS's at-most-once tags and
  // the chief's books must follow the closures in flight, not the closures ever run.
  // Closures go in rounds of 10k, each joined (scheduling all at once would measure the
  // backlog's peak instead); resident memory is read after the first round and the last.
  if (wanted("memory") && memory_closures > 10000) {
    auto mem = (*strategy)->create_variable("mem", tc::Shape{1}, {}, "sgd", 0.0f);
    if (!mem) return fail(mem.error().to_string());
    auto coord_mem = troupe::ClusterCoordinator::make(**strategy, copts);
    if (!coord_mem) return fail(coord_mem.error().to_string());
    auto ps_stats = [&]() -> troupe::net::PsStats {
      troupe::net::PsStats out;
      (*impl.self)
          ->request(impl.ps[0], std::chrono::seconds(30), troupe::net::stats_atom::value)
          .receive([&](std::vector<int64_t>& v) { out = troupe::net::PsStats::from(v); },
                   [](caf::error&) {});
      return out;
    };
    auto run = [&](int n) -> tc::Status {
      for (int done = 0; done < n; done += 10000) {
        for (int i = done; i < std::min(n, done + 10000); ++i)
          if (auto st = (*coord_mem)->schedule_no_result("push_one", 1); !st) return st;
        if (auto st = (*coord_mem)->join(); !st) return st;
      }
      return {};
    };
    if (auto st = run(10000); !st) return fail(st.error().to_string());
    const double chief_warm = troupe::bench::rss_mib();
    const auto ps_warm = ps_stats();
    const auto t0 = clock_type::now();
    if (auto st = run(memory_closures - 10000); !st) return fail(st.error().to_string());
    const double secs = seconds_since(t0);
    const double chief_end = troupe::bench::rss_mib();
    const auto ps_end = ps_stats();
    const double per_10k = 10000.0 / (memory_closures - 10000);
    const double mib = 1 << 20;
    emit({{"bench", "closure_memory"},
          {"closures", memory_closures},
          {"closures_per_sec", (memory_closures - 10000) / secs},
          {"updates_applied", ps_end.updates_applied},
          {"chief_rss_mib_after_10k", chief_warm},
          {"chief_rss_mib_end", chief_end},
          {"chief_growth_kib_per_10k", (chief_end - chief_warm) * 1024 * per_10k},
          {"ps_rss_mib_after_10k", ps_warm.rss_bytes / mib},
          {"ps_rss_mib_end", ps_end.rss_bytes / mib},
          {"ps_growth_kib_per_10k", (ps_end.rss_bytes - ps_warm.rss_bytes) / 1024.0 * per_10k},
          {"ps_applied_tags_end", ps_end.applied_tags}},
         all);
  }
  (*coord)->shutdown_cluster();
  std::cout << troupe::core::json_text(
                   nlohmann::json{{"ok", true}, {"program", "bench_ps"}, {"results", all}})
            << std::endl;
  return 0;
}
