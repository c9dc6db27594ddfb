// The coordinator's dispatch policy and closure book, without processes or actors.
#include <catch2/catch.hpp>

#include <future>
#include <set>

#include "actors/closure_book.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;

TEST_CASE("Closures go to idle workers before any is sent ahead", "[dispatch]") {
  const size_t none = 2;
  SECTION("a worker still being brought up holds back sending ahead") {
    std::vector<WorkerLoad> w{{true, true, 0}, {true, false, 0}};
    CHECK(pick_worker(w, 1, 8) == 0);
    w[0].in_flight = 1;
    CHECK(pick_worker(w, 0, 8) == none);  // waits for worker 1 rather than queue on worker 0
    w[1].ready = true;
    CHECK(pick_worker(w, 0, 8) == 1);
  }
  SECTION("idle workers in turn, then ahead to the least loaded") {
    std::vector<WorkerLoad> w{{true, true, 0}, {true, true, 0}};
    CHECK(pick_worker(w, 1, 8) == 0);
    w[0].in_flight = 1;
    CHECK(pick_worker(w, 0, 8) == 1);
    w[1].in_flight = 1;
    CHECK(pick_worker(w, 1, 8) == 0);  // every worker busy: sent ahead
    w[0].in_flight = 2;
    CHECK(pick_worker(w, 0, 8) == 1);
    w = {{true, true, 2}, {true, true, 2}};
    CHECK(pick_worker(w, 0, 2) == none);  // at the bound
  }
  SECTION("a lost worker does not hold back the others") {
    std::vector<WorkerLoad> w{{true, true, 1}, {false, false, 0}};
    CHECK(pick_worker(w, 0, 8) == 0);
    CHECK(pick_worker(w, 0, 1) == none);
  }
}

TEST_CASE("The closure book: fresh incarnations, watermark, pending error and its mark, bound",
          "[dispatch]") {
  SECTION("two books of one process never share an incarnation") {
    ClosureBook a, b;
    CHECK(a.incarnation() != 0);
    CHECK(a.incarnation() != b.incarnation());
    CHECK(a.incarnation() < 0x8000u);
    ClosureBook fixed(5);
    CHECK(fixed.add(std::make_shared<detail::RemoteState>()).value() == (uint64_t{5} << 32) + 1);
  }
  SECTION("every id below the watermark is settled") {
    ClosureBook book(1);
    std::vector<uint64_t> ids;
    for (int i = 0; i < 4; ++i)
      ids.push_back(book.add(std::make_shared<detail::RemoteState>()).value());
    CHECK(book.settled_below() == ids[0]);
    book.complete(ids[1], {});
    CHECK(book.settled_below() == ids[0]);
    book.complete(ids[0], {});
    CHECK(book.settled_below() == ids[2]);
    book.cancel(ids[2], core::make_error(core::Errc::cancelled, "x"));
    book.complete(ids[3], {});
    CHECK(book.settled_below() == ids[3] + 1);
    CHECK(book.error_through() == ids[3]);  // no error: the last id handed out
  }
  SECTION("a pending error refuses new closures until join() raises it") {
    ClosureBook book(1);
    auto id = book.add(std::make_shared<detail::RemoteState>()).value();
    book.fail(id, core::make_error(core::Errc::invalid_argument, "bad step"));
    auto refused = book.add(std::make_shared<detail::RemoteState>());
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message == "bad step");
    CHECK_FALSE(book.join().ok());
    CHECK(book.add(std::make_shared<detail::RemoteState>()).ok());
  }
  SECTION("an error cancels the ids handed out before it, not those after join() raised it") {
    ClosureBook book(1);
    auto first = book.add(std::make_shared<detail::RemoteState>()).value();
    auto second = book.add(std::make_shared<detail::RemoteState>()).value();
    book.fail(first, core::make_error(core::Errc::invalid_argument, "bad step"));
    CHECK(book.error_through() == second);
    book.cancel(second, core::make_error(core::Errc::cancelled, "x"));
    CHECK_FALSE(book.join().ok());
    // Scheduled once the error was raised, before the coordinator acted on it: not covered.
    auto later = book.add(std::make_shared<detail::RemoteState>()).value();
    CHECK(later > second);
    CHECK(book.error_through() == second);
    book.complete(later, {});
    // The next error keeps its own mark.
    auto third = book.add(std::make_shared<detail::RemoteState>()).value();
    book.abort(core::make_error(core::Errc::unavailable, "ps:0 did not come back"));
    CHECK(book.error_through() == third);
  }
  SECTION("a bound on pending closures makes add() wait for room") {
    ClosureBook book(1, 2);
    auto a = book.add(std::make_shared<detail::RemoteState>()).value();
    book.add(std::make_shared<detail::RemoteState>()).value();
    auto third = std::async(std::launch::async,
                            [&] { return book.add(std::make_shared<detail::RemoteState>()); });
    CHECK(third.wait_for(200ms) == std::future_status::timeout);  // held back
    book.complete(a, {});
    REQUIRE(third.wait_for(5s) == std::future_status::ready);
    CHECK(third.get().ok());
    CHECK(book.counters().scheduled == 3);
  }
  SECTION("abandoning settles every pending closure as cancelled") {
    ClosureBook book(1);
    auto state = std::make_shared<detail::RemoteState>();
    book.add(state).value();
    RemoteValue<int> value(state);
    book.abandon(core::make_error(core::Errc::cancelled, "the coordinator was destroyed"));
    auto r = value.fetch();
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Errc::cancelled);
    CHECK(book.join().ok());
  }
}
