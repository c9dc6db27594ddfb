#pragma once

// The ring tests' helpers (test_ring.cpp, test_ring_links.cpp): ranks as threads of this
// process over real loopback TCP.

#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "actors/collective/ring.hpp"
#include "actors/collective/shm_link.hpp"
#include "helpers.hpp"

namespace troupe::test {

// Runs f(rank, ring) on one thread per rank after forming the ring.
template <class F>
void on_ranks(int n, collective::RingOptions o, F f) {
  const auto addr = test::loopback_addresses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto ring = collective::Ring::form(r, addr, o);
      if (!ring)
        FAIL_CHECK("rank " << r << ": " << ring.error().to_string());
      else
        f(r, **ring);
    });
  for (auto& t : threads)
    t.join();
}

// Whether this machine lets a process make a shared-memory segment (/dev/shm): where it
// does not, the ring uses TCP throughout and the link counts below are 0.
inline bool shm_available() {
  static const bool ok = collective::ShmLink::create(4096).ok();
  return ok;
}

// Small integers: every order of summation gives the same float, so "exact" is exact.
inline float value(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13) % 23) - 11);
}

}  // namespace troupe::test
