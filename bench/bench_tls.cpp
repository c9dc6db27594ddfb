// What TLS (TROUPE_TLS) costs on Troupe's links, each figure next to the same link without
// TLS measured in the same run, the two alternating round by round:
//
//   build/bin/bench_tls [--rounds 5] [--seconds 0.2]
//
// - handshake: connect and prove the cluster secret (plus TLS 1.3's own handshake), median
//   microseconds;
// - channel: a push of N bytes through the tensor channel and its small reply, two threads
//   over 127.0.0.1 (median seconds per push, GB/s);
// - ring: an all-reduce of N bytes among 2 ranks (threads) over TCP, no shared memory.
//
// One JSON line per figure with tls_over_plain (a time ratio: 1.3 is 30% slower), then a
// summary line. Loopback has no wire limit, so these are the CPU costs of encryption: on a
// real network link slower than the cipher they are partly hidden.
#include <algorithm>
#include <chrono>
#include <future>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/collective/ring.hpp"
#include "bench_stats.hpp"
#include "core/json_text.hpp"
#include "examples/command_line.hpp"
#include "net/auth.hpp"
#include "net/channel.hpp"
#include "net/ports.hpp"
#include "net/tls.hpp"

using namespace troupe;
using troupe::bench::clock_type;
using troupe::bench::seconds_since;

namespace {

const std::string secret = "bench_tls: a secret of 32 bytes.";

// A connected, authenticated client and server over 127.0.0.1.
struct Link {
  net::Socket client, server;
};

core::Expected<Link> connect_pair(bool tls) {
  uint16_t port = 0;
  auto listener = net::listen_on("127.0.0.1", port);
  if (!listener) return listener.error();
  auto served = std::async(std::launch::async, [&]() -> core::Expected<net::Socket> {
    std::string peer;
    auto s = net::accept_on(*listener, peer);
    if (!s) return s.error();
    if (auto st = net::authenticate_peer(*s, secret, std::chrono::seconds(5), tls); !st)
      return st.error();
    return std::move(*s);
  });
  auto c = net::connect_to("127.0.0.1", port, std::chrono::seconds(30));
  if (!c) return c.error();
  if (auto st = net::authenticate_to(*c, secret, std::chrono::seconds(5), tls); !st)
    return st.error();
  auto s = served.get();
  if (!s) return s.error();
  return Link{std::move(*c), std::move(*s)};
}

// Seconds per call of `f`, each round's median over calls for `seconds` (at least 5).
template <class F>
std::vector<double> timed(double seconds, F f) {
  std::vector<double> per_call;
  const auto t0 = clock_type::now();
  while (per_call.size() < 5 || seconds_since(t0) < seconds) {
    const auto t = clock_type::now();
    if (!f()) return {};
    per_call.push_back(seconds_since(t));
  }
  return per_call;
}

nlohmann::json figure(const std::string& what, size_t bytes, const std::vector<double>& plain,
                      const std::vector<double>& tls) {
  const double p = bench::median(plain), t = bench::median(tls);
  nlohmann::json j{{"bench", "tls"}, {"link", what}, {"bytes", bytes}};
  if (what == "handshake") {
    j["plain_us"] = p * 1e6;
    j["tls_us"] = t * 1e6;
  } else {
    j["plain_GBps"] = static_cast<double>(bytes) / p / 1e9;
    j["tls_GBps"] = static_cast<double>(bytes) / t / 1e9;
  }
  j["tls_over_plain"] = t / p;
  j["samples"] = plain.size() + tls.size();
  return j;
}

int fail(const std::string& what) {
  std::cerr << "bench_tls: " << what << std::endl;
  std::cout << core::json_text(
                   nlohmann::json{{"ok", false}, {"program", "bench_tls"}, {"error", what}})
            << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"what TLS costs on the tensor channel, the ring and the handshake"};
  int rounds = 5;
  double seconds = 0.2;
  std::vector<size_t> channel_sizes{4 << 10, 256 << 10, 4 << 20, 32 << 20};
  std::vector<size_t> ring_sizes{64 << 10, 4 << 20, 32 << 20};
  app.add_option("--rounds", rounds, "alternating rounds of plain and TLS")
      ->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "time per mode, size and round");
  app.add_option("--channel-sizes", channel_sizes, "bytes per push");
  app.add_option("--ring-sizes", ring_sizes, "bytes per all-reduce");
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "bench_tls")) return *end;
  const auto t_start = clock_type::now();
  std::vector<nlohmann::json> lines;

  // Handshakes.
  {
    std::vector<double> per[2];
    for (int round = 0; round < rounds; ++round)
      for (int tls = 0; tls < 2; ++tls) {
        auto t = timed(seconds, [&] { return connect_pair(tls == 1).ok(); });
        if (t.empty()) return fail("handshake failed");
        per[tls].insert(per[tls].end(), t.begin(), t.end());
      }
    lines.push_back(figure("handshake", 0, per[0], per[1]));
  }

  // The tensor channel: pushes answered by a one-item reply, as a PS answers.
  for (size_t bytes : channel_sizes) {
    net::PsRequest push;
    push.op = static_cast<uint8_t>(net::PsOp::push);
    net::PsItem item;
    item.name = "w#0";
    item.tensor.dims = {static_cast<int64_t>(bytes / sizeof(float))};
    item.tensor.data.assign(bytes / sizeof(float), 0.5f);
    push.items.push_back(std::move(item));
    const std::vector<net::PsItem> reply{{"w#0", {}, {}}};
    std::vector<double> per[2];
    Link links[2];
    for (int tls = 0; tls < 2; ++tls) {
      auto l = connect_pair(tls == 1);
      if (!l) return fail("channel: " + l.error().to_string());
      links[tls] = std::move(*l);
    }
    std::thread servers[2];
    for (int tls = 0; tls < 2; ++tls)
      servers[tls] = std::thread([&, tls] {
        net::ChannelLimits limits;
        for (;;) {
          auto r = net::recv_request(links[tls].server, limits);
          if (!r || !net::send_reply(links[tls].server, reply)) return;
        }
      });
    bool ok = true;
    for (int round = 0; round < rounds && ok; ++round)
      for (int tls = 0; tls < 2 && ok; ++tls) {
        auto t = timed(seconds, [&] {
          return net::send_request(links[tls].client, push).ok() &&
                 net::recv_reply(links[tls].client).ok();
        });
        ok = !t.empty();
        per[tls].insert(per[tls].end(), t.begin(), t.end());
      }
    for (int tls = 0; tls < 2; ++tls) {
      links[tls].client.shutdown();
      servers[tls].join();
    }
    if (!ok) return fail("channel: a push of " + std::to_string(bytes) + " bytes failed");
    lines.push_back(figure("channel", bytes, per[0], per[1]));
  }

  // The ring: 2 ranks, TCP only; a fixed count per round (about `seconds` at 1 GB/s).
  for (size_t bytes : ring_sizes) {
    const size_t iterations =
        std::clamp<size_t>(static_cast<size_t>(seconds * 1e9 / static_cast<double>(bytes)), 5, 500);
    std::vector<double> per[2];
    for (int round = 0; round < rounds; ++round)
      for (int tls = 0; tls < 2; ++tls) {
        net::set_links_encrypted(tls == 1);
        std::vector<net::PortLease> held(2);
        std::vector<std::string> addresses;
        for (auto& h : held) {
          h = net::PortLease::acquire();
          addresses.push_back("127.0.0.1:" + std::to_string(h.port()));
        }
        held.clear();
        collective::RingOptions o;
        o.secret = secret;
        o.shared_memory = false;
        std::vector<double> times[2];
        std::string error;
        std::thread ranks[2];
        for (int r = 0; r < 2; ++r)
          ranks[r] = std::thread([&, r] {
            auto ring = collective::Ring::form(r, addresses, o);
            if (!ring) {
              error = ring.error().to_string();
              return;
            }
            // Both ranks run the same number of all-reduces.
            std::vector<float> data(bytes / sizeof(float), 1.0f);
            for (size_t i = 0; i < iterations; ++i) {
              const auto t = clock_type::now();
              if (!(*ring)
                       ->all_reduce(data.data(), data.size(), collective::Reduction::sum, "x")
                       .ok()) {
                times[r].clear();
                return;
              }
              times[r].push_back(seconds_since(t));
            }
          });
        for (auto& t : ranks)
          t.join();
        if (!error.empty() || times[0].empty()) return fail("ring: " + error);
        per[tls].insert(per[tls].end(), times[0].begin(), times[0].end());
      }
    net::set_links_encrypted(false);
    lines.push_back(figure("ring", bytes, per[0], per[1]));
  }

  double worst = 0;
  for (const auto& l : lines) {
    std::cout << core::json_text(l) << std::endl;
    if (l["link"] != "handshake") worst = std::max(worst, l["tls_over_plain"].get<double>());
  }
  std::cout << core::json_text(nlohmann::json{{"ok", true},
                                              {"program", "bench_tls"},
                                              {"rounds", rounds},
                                              {"worst_tls_over_plain", worst},
                                              {"wall_s", seconds_since(t_start)}})
            << std::endl;
  return 0;
}
