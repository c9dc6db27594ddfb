// The collective engine: submitted collectives run in order on its thread while the caller
// goes on; call() runs on the caller's thread after them; a failure skips what was queued
// behind it until drain() reports it; a throwing job is an error; shutting down cancels.
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/collective/engine.hpp"

using namespace troupe;
using collective::Engine;
using std::chrono::seconds;

namespace {

// The order collectives ran in, and on which threads.
struct Log {
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  void add(int i) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(i);
    threads.push_back(std::this_thread::get_id());
  }
};

}  // namespace

TEST_CASE("submitted collectives run in order on the engine's thread while the caller goes on",
          "[engine]") {
  Engine engine;
  Log log;
  std::promise<void> caller_went_on;
  auto went_on = caller_went_on.get_future();
  // The first one runs only once the caller has gone on past both submits: were submit
  // synchronous, it would time out here.
  auto first = engine.submit("bucket 0", [&]() -> core::Status {
    if (went_on.wait_for(seconds(10)) != std::future_status::ready)
      return core::make_error(core::Errc::unavailable, "the caller never went on");
    log.add(0);
    return {};
  });
  auto second = engine.submit("bucket 1", [&]() -> core::Status {
    log.add(1);
    return {};
  });
  caller_went_on.set_value();
  // call() waits for both, then runs here.
  REQUIRE(engine
              .call("bucket 2",
                    [&]() -> core::Status {
                      log.add(2);
                      return {};
                    })
              .ok());
  CHECK(first.wait().ok());
  CHECK(second.wait().ok());
  REQUIRE(engine.drain().ok());
  CHECK(log.order == std::vector<int>{0, 1, 2});
  CHECK(log.threads[0] != std::this_thread::get_id());
  CHECK(log.threads[1] == log.threads[0]);
  CHECK(log.threads[2] == std::this_thread::get_id());
  const auto s = engine.stats();
  CHECK(s.submitted == 2);
  CHECK(s.called == 1);
  CHECK(s.skipped == 0);
}

TEST_CASE("after a failed collective the ones behind it do not run until drain reports it",
          "[engine]") {
  Engine engine;
  std::atomic<int> ran{0};
  auto ok = [&]() -> core::Status {
    ++ran;
    return {};
  };
  auto a = engine.submit("bucket 0", [&]() -> core::Status {
    ++ran;
    return core::make_error(core::Errc::unavailable, "rank 2 has not submitted it");
  });
  auto b = engine.submit("bucket 1", ok);
  auto c = engine.call("bucket 2", ok);
  auto sa = a.wait();
  auto sb = b.wait();
  REQUIRE_FALSE(sa.ok());
  REQUIRE_FALSE(sb.ok());
  REQUIRE_FALSE(c.ok());
  CHECK(ran == 1);
  // The skipped ones keep the failure's code (a lost rank stays a lost rank) and name it.
  CHECK(sb.error().code == core::Errc::unavailable);
  CHECK_THAT(sb.error().message, Catch::Contains("'bucket 1' not run"));
  CHECK_THAT(sb.error().message, Catch::Contains("'bucket 0' before it failed"));
  CHECK_THAT(c.error().message, Catch::Contains("rank 2 has not submitted it"));
  auto first = engine.drain();
  REQUIRE_FALSE(first.ok());
  CHECK_THAT(first.error().message, Catch::Contains("rank 2 has not submitted it"));
  // Reported: the next ones run (a re-formed ring).
  CHECK(engine.call("reform", ok).ok());
  CHECK(engine.submit("bucket 3", ok).wait().ok());
  CHECK(ran == 3);
  CHECK(engine.drain().ok());
  CHECK(engine.stats().skipped == 2);
}

TEST_CASE("a collective that throws is an error naming it and the engine goes on", "[engine]") {
  Engine engine;
  auto t = engine.submit("bucket 0", []() -> core::Status { throw std::runtime_error("boom"); });
  auto st = t.wait();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == core::Errc::internal);
  CHECK_THAT(st.error().message, Catch::Contains("'bucket 0' threw: boom"));
  CHECK_FALSE(engine.drain().ok());
  CHECK(engine.submit("bucket 1", []() -> core::Status { return {}; }).wait().ok());
}

TEST_CASE("an engine shut down cancels what it had not started and waits for the running one",
          "[engine]") {
  std::promise<void> started, release;
  auto started_f = started.get_future();
  auto release_f = release.get_future().share();
  std::atomic<bool> second_ran{false};
  Engine::Ticket running, queued;
  core::Status queued_outcome;
  std::thread releaser;
  {
    Engine engine;
    running = engine.submit("bucket 0", [&]() -> core::Status {
      started.set_value();
      if (release_f.wait_for(seconds(10)) != std::future_status::ready)
        return core::make_error(core::Errc::unavailable, "never released");
      return {};
    });
    queued = engine.submit("bucket 1", [&]() -> core::Status {
      second_ran = true;
      return {};
    });
    REQUIRE(started_f.wait_for(seconds(10)) == std::future_status::ready);
    // Released only once the destructor has begun (it cancels the queued one first).
    releaser = std::thread([&] {
      queued_outcome = queued.wait();
      release.set_value();
    });
  }
  releaser.join();
  REQUIRE_FALSE(queued_outcome.ok());
  CHECK(queued_outcome.error().code == core::Errc::cancelled);
  CHECK(running.wait().ok());
  CHECK_FALSE(second_ran);
}
