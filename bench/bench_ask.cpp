// What a bounded request costs from a blocking actor: CAF 0.17's request(dest, timeout)
// against net::ask (an unbounded request with a bounded receive) and an unbounded request,
// each made many times to a local actor that answers at once. Reports per call the time
// and the resident memory still held after the calls (CAF keeps a clock entry per timed
// request until its timeout fires), medians of several rounds.
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "bench_stats.hpp"
#include "core/json_text.hpp"
#include "examples/command_line.hpp"
#include "net/ask.hpp"
#include "net/node.hpp"

using namespace troupe;
using clock_type = std::chrono::steady_clock;

namespace {

using echo_atom = caf::atom_constant<caf::atom("echo")>;

caf::behavior echo(caf::event_based_actor*) {
  return {[](echo_atom, int x) { return x; }};
}

struct Round {
  double us_per_call;
  double bytes_held_per_call;
};

template <class Call>
Round measure(int calls, Call call) {
  const double before = bench::rss_mib();
  const auto t0 = clock_type::now();
  for (int i = 0; i < calls; ++i)
    if (!call(i)) throw std::runtime_error("a call failed");
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  const double held = (bench::rss_mib() - before) * (1 << 20);
  return {s * 1e6 / calls, held / calls};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_ask: bounded requests from a blocking actor"};
  int calls = 200000, rounds = 3, timeout_s = 600;
  app.add_option("--calls", calls, "calls per round and kind")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds)->check(CLI::PositiveNumber);
  app.add_option("--timeout-s", timeout_s, "the bound of the timed calls")
      ->check(CLI::PositiveNumber);
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "bench_ask")) return *end;
  try {
    caf::actor_system_config cfg;
    net::configure(cfg);
    caf::actor_system sys{cfg};
    auto actor = sys.spawn(echo);
    caf::scoped_actor self{sys};
    const std::chrono::milliseconds timeout{int64_t{timeout_s} * 1000};
    std::vector<double> us_timed, us_ask, us_plain, held_timed, held_ask, held_plain;
    for (int r = 0; r < rounds; ++r) {
      // Each kind in turn within a round, so that they share the machine's noise.
      const auto plain = measure(calls, [&](int i) {
        bool ok = false;
        self->request(actor, caf::infinite, echo_atom::value, i)
            .receive([&](int x) { ok = x == i; }, [](caf::error&) {});
        return ok;
      });
      const auto asked = measure(calls, [&](int i) {
        bool ok = false;
        return net::ask(
                   *self, actor, {timeout, "echo"}, [&](int x) { ok = x == i; }, echo_atom::value,
                   i)
                   .ok() &&
               ok;
      });
      const auto timed = measure(calls, [&](int i) {
        bool ok = false;
        self->request(actor, timeout, echo_atom::value, i)
            .receive([&](int x) { ok = x == i; }, [](caf::error&) {});
        return ok;
      });
      us_plain.push_back(plain.us_per_call);
      us_ask.push_back(asked.us_per_call);
      us_timed.push_back(timed.us_per_call);
      held_plain.push_back(plain.bytes_held_per_call);
      held_ask.push_back(asked.bytes_held_per_call);
      held_timed.push_back(timed.bytes_held_per_call);
    }
    const double plain_us = bench::median(us_plain);
    nlohmann::json out{{"ok", true},
                       {"program", "bench_ask"},
                       {"calls_per_round", calls},
                       {"rounds", rounds},
                       {"timeout_s", timeout_s},
                       {"unbounded_us_per_call", plain_us},
                       {"ask_us_per_call", bench::median(us_ask)},
                       {"caf_timed_us_per_call", bench::median(us_timed)},
                       {"ask_vs_unbounded_time", bench::median(us_ask) / plain_us},
                       {"caf_timed_vs_unbounded_time", bench::median(us_timed) / plain_us},
                       {"unbounded_bytes_held_per_call", bench::median(held_plain)},
                       {"ask_bytes_held_per_call", bench::median(held_ask)},
                       {"caf_timed_bytes_held_per_call", bench::median(held_timed)}};
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    std::cout << core::json_text(out) << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cout << core::json_text(
                     nlohmann::json{{"ok", false}, {"program", "bench_ask"}, {"error", e.what()}})
              << std::endl;
    return 1;
  }
}
