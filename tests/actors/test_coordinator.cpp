// The coordinator and its worker proxies in one process, against fake workers: actors that
// answer the worker protocol (vars, dataset, run, cancel, shutdown) as each test needs,
// and log what they were asked. What the process tests reach only through real training.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <mutex>
#include <set>
#include <vector>

#include <caf/io/all.hpp>

#include "actor_fixture.hpp"
#include "actors/coordinator.hpp"
#include "core/runtime/remote_value.hpp"
#include "net/connect.hpp"
#include "net/node.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;
using Status = detail::RemoteState::Status;

namespace {

// What the fake workers were asked, in order, e.g. "w0 run hang".
struct Log {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> lines;
  void add(std::string line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(std::move(line));
    cv.notify_all();
  }
  bool wait_for(const std::string& line, std::chrono::milliseconds bound) {
    return wait_for_any({line}, bound);
  }
  bool wait_for_any(const std::vector<std::string>& any, std::chrono::milliseconds bound) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, bound, [&] {
      return std::find_first_of(lines.begin(), lines.end(), any.begin(), any.end()) != lines.end();
    });
  }
  size_t count(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    return static_cast<size_t>(std::count(lines.begin(), lines.end(), line));
  }
};

struct FakeState {
  std::vector<caf::response_promise> held;     // "hang" closures, never answered
  std::vector<caf::response_promise> failing;  // "fail_later" closures, failed on "release"
  static inline const char* name = "fake_worker";
};

// Steps: "ok" answers its id's bytes, "fail" a step error, "fail_later" the same error once
// the worker is sent "release", "hang" never answers, "crash" ends the worker (its proxy
// sees it go down). Dataset "nosuch" is the worker's own error.
caf::behavior fake_worker(caf::stateful_actor<FakeState>* self, std::shared_ptr<Log> log,
                          std::string name) {
  return {
      [=](net::vars_atom, std::vector<net::Placement>&) {
        log->add(name + " vars");
        return caf::actor_cast<caf::actor>(self);  // its own control actor
      },
      [=](net::dataset_atom, std::string& dataset) -> caf::result<caf::ok_atom> {
        log->add(name + " dataset " + dataset);
        if (dataset == "nosuch")
          return net::to_caf(core::make_error(core::Errc::not_found, "no dataset function"));
        return caf::ok_atom::value;
      },
      [=](net::run_atom, net::ClosureMsg& c) -> caf::result<std::vector<char>> {
        log->add(name + " run " + c.step);
        if (c.step == "fail")
          return net::to_caf(core::make_error(core::Errc::invalid_argument, "bad step"));
        if (c.step == "crash") {
          self->quit(caf::exit_reason::user_shutdown);
          return caf::delegated<std::vector<char>>{};  // no answer: it is gone
        }
        if (c.step == "hang") {
          self->state.held.push_back(self->make_response_promise());
          return caf::delegated<std::vector<char>>{};
        }
        if (c.step == "fail_later") {
          self->state.failing.push_back(self->make_response_promise());
          return caf::delegated<std::vector<char>>{};
        }
        return std::vector<char>(name.begin(), name.end());
      },
      [=](std::string& what) {
        if (what != "release") return;
        for (auto& p : self->state.failing)
          p.deliver(net::to_caf(core::make_error(core::Errc::invalid_argument, "bad step")));
        self->state.failing.clear();
      },
      [=](net::cancel_atom, uint64_t) { log->add(name + " cancel"); },
      [=](net::shutdown_atom) { return caf::ok_atom::value; },
  };
}

struct Fixture : test::ActorFixture {
  std::shared_ptr<Log> log = std::make_shared<Log>();
  std::shared_ptr<ClosureBook> book;
  caf::actor coordinator;
  std::vector<caf::actor> fakes;

  // `n` fake workers; their address is a closed loopback port, so a lost one stays lost.
  void start(size_t n, CoordinatorOptions options) {
    book = std::make_shared<ClosureBook>(1);
    std::vector<Endpoint> workers;
    for (size_t w = 0; w < n; ++w) {
      fakes.push_back(sys->spawn(fake_worker, log, "w" + std::to_string(w)));
      workers.push_back({fakes.back(), "127.0.0.1", 1, "worker:" + std::to_string(w)});
    }
    options.rejoin_interval = 50ms;
    coordinator = spawn_coordinator(*sys, std::move(workers), {}, {}, book, options);
  }
  ~Fixture() {
    if (coordinator) caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    for (auto& f : fakes)
      caf::anon_send_exit(f, caf::exit_reason::user_shutdown);
  }
  std::shared_ptr<detail::RemoteState> schedule(const std::string& step) {
    auto state = std::make_shared<detail::RemoteState>();
    net::ClosureMsg c;
    c.id = book->add(state).value();
    c.step = step;
    caf::anon_send(coordinator, net::run_atom::value, std::move(c));
    return state;
  }
  core::Status dataset(const std::string& name) {
    core::Status out;
    (*self)
        ->request(coordinator, 10s, net::dataset_atom::value, name)
        .receive([](caf::ok_atom) {}, [&](caf::error& e) { out = net::from_caf(e); });
    return out;
  }
};

// join(), bounded: every scheduled closure settled within 10 s, or a failure.
core::Status join(ClosureBook& book) {
  const bool settled = book.wait_for(
      [](const auto& c) { return c.completed + c.failed + c.cancelled == c.scheduled; }, 10s);
  if (!settled)
    return core::make_error(core::Errc::unavailable, "test: closures still pending after 10 s");
  return book.join();
}

Status status_of(const std::shared_ptr<detail::RemoteState>& s) {
  std::lock_guard<std::mutex> lock(s->mu);
  return s->status;
}

}  // namespace

TEST_CASE_METHOD(Fixture, "The coordinator runs closures on every worker and settles each once",
                 "[coordinator]") {
  start(2, {});
  std::vector<std::shared_ptr<detail::RemoteState>> results;
  for (int i = 0; i < 40; ++i)
    results.push_back(schedule("ok"));
  REQUIRE(join(*book).ok());
  std::set<std::string> ran_on;
  for (const auto& r : results) {
    REQUIRE(status_of(r) == Status::ready);
    ran_on.insert(std::string(r->bytes.begin(), r->bytes.end()));
  }
  CHECK(ran_on == std::set<std::string>{"w0", "w1"});
  CHECK(log->count("w0 vars") == 1);
  CHECK(log->count("w1 vars") == 1);
  const auto stats = book->counters();
  CHECK(stats.completed == 40);
  CHECK(stats.workers_lost == 0);
}

TEST_CASE_METHOD(Fixture,
                 "A lost worker's closures run elsewhere, and one that keeps crashing fails",
                 "[coordinator]") {
  CoordinatorOptions options;
  options.max_closure_losses = 2;
  start(3, options);
  auto fine = schedule("ok");  // first: nothing has failed yet when both are scheduled
  auto crash = schedule("crash");
  const core::Status joined = join(*book);
  REQUIRE_FALSE(joined.ok());
  CHECK(joined.error().code == core::Errc::internal);
  CHECK_THAT(joined.error().message,
             Catch::Contains("step 'crash'") && Catch::Contains("lost its worker 2 times"));
  CHECK(status_of(crash) == Status::failed);
  CHECK(status_of(fine) == Status::ready);  // answered by a worker that was not lost
  const auto stats = book->counters();
  CHECK(stats.workers_lost == 2);
  CHECK(stats.retried == 1);  // the crashing closure, once, before its second loss failed it
  CHECK(stats.failed == 1);
}

TEST_CASE_METHOD(Fixture, "A step error cancels what is queued and what a busy worker holds",
                 "[coordinator]") {
  CoordinatorOptions options;
  options.max_in_flight_per_worker = 1;  // the rest stay queued
  start(2, options);
  auto hung = schedule("hang");  // on whichever worker is up first
  // Fails only when released, after the rest are queued: a step error raised earlier would
  // refuse the next schedule() with it, as TensorFlow's does.
  auto failing = schedule("fail_later");
  std::vector<std::shared_ptr<detail::RemoteState>> queued;
  for (int i = 0; i < 5; ++i)
    queued.push_back(schedule("ok"));
  REQUIRE(log->wait_for_any({"w0 run fail_later", "w1 run fail_later"}, 10s));
  // A bounded wait says what is unsettled (what the Python API waits in, seeing Ctrl-C).
  CHECK_FALSE(book->wait_done(20ms));
  CHECK_FALSE(RemoteValue<int>(failing).wait_for(20ms));
  for (auto& f : fakes)
    caf::anon_send(f, std::string("release"));
  const core::Status joined = join(*book);  // returns without the hung closure's answer
  REQUIRE_FALSE(joined.ok());
  CHECK(joined.error().code == core::Errc::invalid_argument);
  CHECK(status_of(failing) == Status::failed);
  CHECK(status_of(hung) == Status::cancelled);
  CHECK(book->wait_done(0ms));
  CHECK(RemoteValue<int>(hung).wait_for(0ms));
  for (const auto& q : queued)
    CHECK(status_of(q) == Status::cancelled);
  // The busy worker's control actor is told (a running step sees cancelled()).
  const std::string holder = log->count("w0 run hang") == 1 ? "w0" : "w1";
  CHECK(log->count(holder + " run hang") == 1);
  CHECK(log->wait_for(holder + " cancel", 10s));
  CHECK(log->count("w0 run ok") + log->count("w1 run ok") == 0);
  // After join() raised the error, scheduling works again.
  auto later = schedule("ok");
  REQUIRE(join(*book).ok());
  CHECK(status_of(later) == Status::ready);
}

TEST_CASE_METHOD(Fixture,
                 "A closure scheduled before an error but reaching the coordinator after it is "
                 "cancelled",
                 "[coordinator]") {
  start(2, {});
  // The user's thread took an id, then lost the race to send it: the error came first.
  auto late = std::make_shared<detail::RemoteState>();
  net::ClosureMsg held;
  held.id = book->add(late).value();
  held.step = "ok";
  auto failing = schedule("fail");
  REQUIRE(book->wait_for([](const auto& c) { return c.failed == 1; }, 10s));
  caf::anon_send(coordinator, net::run_atom::value, std::move(held));
  const core::Status joined = join(*book);
  REQUIRE_FALSE(joined.ok());
  CHECK(joined.error().code == core::Errc::invalid_argument);
  CHECK(status_of(failing) == Status::failed);
  CHECK(status_of(late) == Status::cancelled);
  CHECK(late->error.message == joined.error().message);
  const auto stats = book->counters();
  CHECK(stats.cancelled == 1);
  CHECK(stats.failed == 1);
  CHECK(log->count("w0 run ok") + log->count("w1 run ok") == 0);
  // A closure scheduled after join() raised the error runs.
  auto later = schedule("ok");
  REQUIRE(join(*book).ok());
  CHECK(status_of(later) == Status::ready);
}

TEST_CASE_METHOD(Fixture,
                 "A dataset call waits for every worker, and a worker's own error names it",
                 "[coordinator]") {
  start(2, {});
  REQUIRE(dataset("train").ok());
  CHECK(log->count("w0 dataset train") == 1);
  CHECK(log->count("w1 dataset train") == 1);
  const core::Status bad = dataset("nosuch");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == core::Errc::not_found);
  CHECK_THAT(bad.error().message, Catch::Contains("dataset 'nosuch'"));
  // A lost worker is skipped: the call answers without it.
  caf::anon_send_exit(fakes[0], caf::exit_reason::kill);
  REQUIRE(book->wait_for([](const auto& c) { return c.workers_lost == 1; }, 10s));
  REQUIRE(dataset("eval").ok());
  CHECK(log->count("w1 dataset eval") == 1);
  CHECK(log->count("w0 dataset eval") == 0);
}

TEST_CASE(
    "A lost worker that answers on its address again is brought up to date, then runs "
    "closures",
    "[coordinator]") {
  // The workers live in a second actor system (another node), published on loopback.
  test::ActorFixture chief, node;
  auto log = std::make_shared<Log>();
  auto first = node.sys->spawn(fake_worker, log, "first");
  // Ended whatever fails below: a live actor would keep the node's system from shutting down.
  struct Kill {
    std::vector<caf::actor> actors;
    ~Kill() {
      for (auto& a : actors)
        caf::anon_send_exit(a, caf::exit_reason::kill);
    }
  } kill{{first}};
  auto port = node.sys->middleman().publish(first, 0, "127.0.0.1", true);
  REQUIRE(port);
  // Not the middleman's remote_actor: CAF gives a connection it dials only until its next
  // heartbeat tick to be answered, less than a sanitized node under load may need.
  auto handle =
      net::connect_with_retry(*chief.sys, "127.0.0.1:" + std::to_string(*port), "worker:0", 30s);
  INFO((handle ? std::string("connected") : handle.error().message));
  REQUIRE(handle);
  auto book = std::make_shared<ClosureBook>(1);
  CoordinatorOptions options;
  options.rejoin_interval = 50ms;
  auto coordinator = spawn_coordinator(
      *chief.sys, {{handle.value(), "127.0.0.1", *port, "worker:0"}}, {}, {}, book, options);
  struct End {
    caf::actor a;
    ~End() { caf::anon_send_exit(a, caf::exit_reason::user_shutdown); }
  } end{coordinator};
  (*chief.self)
      ->request(coordinator, 10s, net::dataset_atom::value, std::string("train"))
      .receive([](caf::ok_atom) {}, [](caf::error& e) { FAIL(to_string(e)); });
  CHECK(log->count("first dataset train") == 1);

  caf::anon_send_exit(first, caf::exit_reason::kill);
  REQUIRE(book->wait_for([](const auto& c) { return c.workers_lost == 1; }, 10s));
  // Scheduled while no worker is there: it waits in the queue.
  auto state = std::make_shared<detail::RemoteState>();
  net::ClosureMsg c;
  c.id = book->add(state).value();
  c.step = "ok";
  caf::anon_send(coordinator, net::run_atom::value, std::move(c));
  REQUIRE(node.sys->middleman().unpublish(first, *port));
  auto second = node.sys->spawn(fake_worker, log, "second");
  kill.actors.push_back(second);
  REQUIRE(node.sys->middleman().publish(second, *port, "127.0.0.1", true));
  REQUIRE(book->wait_for([](const auto& c) { return c.worker_rejoins == 1; }, 10s));
  REQUIRE(join(*book).ok());
  CHECK(std::string(state->bytes.begin(), state->bytes.end()) == "second");
  // Brought up to date first: the placement, then every dataset, then the closure.
  std::vector<std::string> second_lines;
  {
    std::lock_guard<std::mutex> lock(log->mu);
    for (const auto& l : log->lines)
      if (l.rfind("second ", 0) == 0) second_lines.push_back(l);
  }
  CHECK(second_lines ==
        std::vector<std::string>{"second vars", "second dataset train", "second run ok"});
  caf::anon_send_exit(second, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(Fixture, "A coordinator without workers answers a dataset call at once",
                 "[coordinator]") {
  start(0, {});
  CHECK(dataset("train").ok());
}
