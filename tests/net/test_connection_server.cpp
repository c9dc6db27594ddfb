// ConnectionServer: the listener with a thread per connection under the tensor channel and
// the CAF gate. Here its two ways to end: stop() cuts every connection at once, drain()
// stops accepting and lets open connections finish (what a task shutting down relies on
// to get its acknowledgement out through its gate).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "helpers.hpp"
#include "net/auth.hpp"
#include "net/connection_server.hpp"
#include "net/gate.hpp"
#include "net/socket.hpp"
#include "process.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

constexpr size_t reply_bytes = 4 << 20;  // more than the socket buffers hold

// A server whose handler signals that it runs, waits for one byte from its peer, then
// writes `reply_bytes` and returns.
struct ReplyingServer {
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  std::unique_ptr<net::ConnectionServer> server;
  uint16_t port = 0;

  ReplyingServer() {
    auto listener = net::listen_on("127.0.0.1", port);
    REQUIRE(listener);
    auto s = net::ConnectionServer::start(std::move(*listener), port,
                                          [this](net::Socket& sock, const std::string&) {
                                            {
                                              std::lock_guard<std::mutex> lock(mu);
                                              ++running;
                                            }
                                            cv.notify_all();
                                            char go = 0;
                                            if (::recv(sock.fd(), &go, 1, 0) != 1) return;
                                            std::vector<char> reply(reply_bytes, 'r');
                                            size_t sent = 0;
                                            while (sent < reply.size()) {
                                              const ssize_t w =
                                                  ::send(sock.fd(), reply.data() + sent,
                                                         reply.size() - sent, MSG_NOSIGNAL);
                                              if (w <= 0) return;
                                              sent += static_cast<size_t>(w);
                                            }
                                          },
                                          {});
    REQUIRE(s);
    server = std::move(*s);
  }

  bool wait_running(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 10s, [&] { return running >= n; });
  }
};

// Reads until the peer closes (or 10 s pass); returns the bytes read.
size_t read_to_end(const net::Socket& s) {
  net::set_io_timeout(s, 10s);
  std::vector<char> buf(64 << 10);
  size_t total = 0;
  for (;;) {
    const ssize_t r = ::recv(s.fd(), buf.data(), buf.size(), 0);
    if (r <= 0) return total;
    total += static_cast<size_t>(r);
  }
}

// True once dialling `port` is refused, within 10 s.
bool refused_within(uint16_t port) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto c = net::connect_to("127.0.0.1", port, 1s);
    if (!c) return true;
    std::this_thread::yield();
  }
  return false;
}

}  // namespace

TEST_CASE("ConnectionServer drain lets open connections finish and refuses new ones",
          "[net][connection_server]") {
  ReplyingServer rs;
  auto client = net::connect_to("127.0.0.1", rs.port, 10s);
  REQUIRE(client);
  REQUIRE(rs.wait_running(1));
  auto drained = std::async(std::launch::async, [&] { rs.server->drain(30s); });
  // Draining: the listener is closed, the open connection goes on.
  REQUIRE(refused_within(rs.port));
  const char go = 1;
  REQUIRE(::send(client->fd(), &go, 1, MSG_NOSIGNAL) == 1);
  CHECK(read_to_end(*client) == reply_bytes);
  drained.get();  // returns once the handler did, long before 30 s
}

TEST_CASE("ConnectionServer drain ends a connection that outlasts it, and stop cuts at once",
          "[net][connection_server]") {
  ReplyingServer rs;
  auto first = net::connect_to("127.0.0.1", rs.port, 10s);
  auto second = net::connect_to("127.0.0.1", rs.port, 10s);
  REQUIRE(first);
  REQUIRE(second);
  REQUIRE(rs.wait_running(2));
  SECTION("drain") {
    // Neither peer sends its byte: drain waits out its bound, then shuts both down.
    rs.server->drain(100ms);
  }
  SECTION("stop") {
    rs.server->stop();
  }
  CHECK(read_to_end(*first) == 0);
  CHECK(read_to_end(*second) == 0);
  // Ending again does nothing.
  rs.server->drain(100ms);
  rs.server->stop();
}

namespace {

// Threads of this process now.
size_t threads_now() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// Whether the server closed `s` (EOF or reset) within 10 s; bytes it sent first are
// skipped (the challenge).
bool closed_by_server(const net::Socket& s) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  char buf[256];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{s.fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t r = ::recv(s.fd(), buf, sizeof buf, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN)) return true;
  }
  return false;
}

// Whether `s` is still open: no end (EOF, reset) among the bytes it has now.
bool still_open(const net::Socket& s) {
  char buf[256];
  for (;;) {
    const ssize_t r = ::recv(s.fd(), buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) continue;
    return r < 0 && errno == EAGAIN;
  }
}

// A door (deadline `deadline`, `max_unproven` strangers held) whose members get "ok".
struct Door {
  uint16_t port = 0;
  std::atomic<int> refused{0};
  std::unique_ptr<net::ConnectionServer> server;
  Door(std::chrono::milliseconds deadline, size_t max_unproven) {
    auto listener = net::listen_on("127.0.0.1", port);
    REQUIRE(listener);
    net::DoorOptions door;
    door.secret = test::secret;
    door.deadline = deadline;
    door.max_unproven = max_unproven;
    auto s = net::ConnectionServer::start(
        std::move(*listener), port,
        [](net::Socket& sock, const std::string&) { net::send_all(sock, "ok", 2); },
        [this](const std::string&, const std::string&) { ++refused; }, 4, door);
    REQUIRE(s);
    server = std::move(*s);
  }
  // A member's round trip: proof, then the handler's "ok".
  bool member_served() {
    auto s = net::connect_to("127.0.0.1", port, 5s);
    if (!s || !net::authenticate_to(*s, test::secret, 5s).ok()) return false;
    net::set_io_timeout(*s, 5s);
    char ok[2] = {};
    return ::recv(s->fd(), ok, 2, MSG_WAITALL) == 2 && ok[0] == 'o' && ok[1] == 'k';
  }
};

}  // namespace

// Found from outside: 256 connections sending a byte every 4 s held every slot of a PS's
// gate and channel for minutes (each read could wait 5 s, each cost a thread), members
// were refused and the job died. The door now drives every handshake from one thread,
// each to a deadline counted from accept, and drops the oldest unproven past its cap.
TEST_CASE("ConnectionServer's door: strangers cost no thread, never crowd out members",
          "[net][connection_server][auth]") {
  Door door(10000ms, 8);
  REQUIRE(door.member_served());
  const size_t threads_before = threads_now();

  // 40 strangers: idle ones, ones that stop after "TRA1", ones dripping a byte at a time.
  std::vector<net::Socket> strangers;
  for (int i = 0; i < 40; ++i) {
    auto s = net::connect_to("127.0.0.1", door.port, 5s);
    REQUIRE(s);
    if (i % 2 == 1) net::send_all(*s, "TRA1", 4);
    strangers.push_back(std::move(*s));
  }
  // Held by the one acceptor thread, not a thread each (a member thread may still be
  // ending; the 40 would be 40).
  CHECK(threads_now() <= threads_before + 2);
  // A member is served in the middle of them, at once: it never waits behind them.
  CHECK(door.member_served());
  // Past the cap of 8 the oldest went first: of the 41 unproven (the member too, until
  // its proof) the first 33 are closed, the last 7 strangers held (their 10 s deadline is
  // far off).
  for (size_t i = 0; i < 33; ++i)
    CHECK(closed_by_server(strangers[i]));
  for (size_t i = 33; i < 40; ++i)
    CHECK(still_open(strangers[i]));
  CHECK(door.refused == 33);

  // A stranger dripping a byte every 50 ms would take 3.4 s to send a hello: a 1 s
  // deadline from accept ends it before, however steadily it sends.
  Door quick(1000ms, 8);
  auto drip = net::connect_to("127.0.0.1", quick.port, 5s);
  REQUIRE(drip);
  size_t sent = 0;
  bool closed = false;
  while (!closed && sent < 68) {
    pollfd p{drip->fd(), POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char buf[64];
      const ssize_t r = ::recv(drip->fd(), buf, sizeof buf, MSG_DONTWAIT);
      closed = r == 0 || (r < 0 && errno != EAGAIN);
      continue;
    }
    if (::send(drip->fd(),
               &"TRA1xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"[sent], 1,
               MSG_NOSIGNAL) != 1)
      closed = true;
    else
      ++sent;
  }
  CHECK(closed);
  CHECK(sent < 68);
  // Garbage is refused on its first four bytes.
  auto junk = net::connect_to("127.0.0.1", quick.port, 5s);
  REQUIRE(junk);
  net::send_all(*junk, "GET / HTTP/1.1\r\n", 16);
  CHECK(closed_by_server(*junk));
  CHECK(quick.member_served());
  CHECK(quick.refused == 2);
}

// Found at 64 workers on one host: every task dialled ps:0's gate and channel at once,
// before the machine had scheduled any of them to answer its challenge, and past 64
// unproven the door dropped members as if they were strangers. A door sized for its job
// holds every task unproven at once, and every one a member.
TEST_CASE("A door sized for its job lets every task dial at once and prove late",
          "[net][connection_server][auth]") {
  auto cluster_of = [](int workers) {
    std::vector<std::string> addresses;
    for (int i = 0; i < workers; ++i)
      addresses.push_back("127.0.0.1:" + std::to_string(20000 + i));
    return net::ClusterSpec(
        {{"chief", {"127.0.0.1:19998"}}, {"ps", {"127.0.0.1:19999"}}, {"worker", addresses}});
  };
  const net::GateLimits defaults;
  const auto small = net::GateLimits::for_cluster(cluster_of(2));
  CHECK(small.max_unproven == defaults.max_unproven);
  CHECK(small.max_connections == defaults.max_connections);
  const auto job = net::GateLimits::for_cluster(cluster_of(150));
  CHECK(job.max_unproven >= 152);
  CHECK(job.max_connections >= 2 * 152);

  // Every other task (151) dials, and only then does each prove the secret and get served.
  auto dial_all_then_prove = [](size_t max_unproven, size_t max_connections) {
    uint16_t port = 0;
    auto listener = net::listen_on("127.0.0.1", port);
    REQUIRE(listener);
    net::DoorOptions door;
    door.secret = test::secret;
    door.deadline = 30000ms;
    door.max_unproven = max_unproven;
    std::atomic<int> refused{0};
    auto server = net::ConnectionServer::start(
        std::move(*listener), port,
        [](net::Socket& sock, const std::string&) { net::send_all(sock, "ok", 2); },
        [&](const std::string&, const std::string&) { ++refused; }, max_connections, door);
    REQUIRE(server);
    std::vector<net::Socket> tasks;
    for (int i = 0; i < 151; ++i) {
      auto s = net::connect_to("127.0.0.1", port, 5s);
      REQUIRE(s);
      tasks.push_back(std::move(*s));
    }
    int served = 0;
    for (auto& s : tasks) {
      if (!net::authenticate_to(s, test::secret, 5s).ok()) continue;
      net::set_io_timeout(s, 5s);
      char ok[2] = {};
      served += ::recv(s.fd(), ok, 2, MSG_WAITALL) == 2 && ok[0] == 'o' ? 1 : 0;
    }
    (*server)->stop();
    return std::make_pair(served, refused.load());
  };
  const auto sized = dial_all_then_prove(job.max_unproven, job.max_connections);
  CHECK(sized.first == 151);
  CHECK(sized.second == 0);
  // The default door drops the first dialled past its 64: members refused.
  const auto fixed = dial_all_then_prove(defaults.max_unproven, defaults.max_connections);
  CHECK(fixed.first < 151);
  CHECK(fixed.second == 151 - fixed.first);
}

// A flood of strangers wrote 24 000 refusal lines into one PS's log in 20 s: the lines are
// now cut to a burst per period, the next one shown saying how many were held back.
namespace {

// What this process writes to stderr (fd 2) while it lives, into a file of `dir`; read
// through a descriptor opened at the start (the test may leave none free later).
class StderrCapture {
 public:
  explicit StderrCapture(const test::TempDir& dir) {
    const std::string path = dir.file("stderr");
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(file >= 0);
    ::dup2(file, 2);
    ::close(file);
    reader_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(reader_ >= 0);
    written_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    REQUIRE(written_ >= 0);
    REQUIRE(::inotify_add_watch(written_, path.c_str(), IN_MODIFY) >= 0);
  }
  ~StderrCapture() {
    restore();
    ::close(reader_);
    ::close(written_);
  }
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string text() const {
    std::fflush(stderr);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::pread(reader_, buf, sizeof buf, static_cast<off_t>(out.size()))) > 0;)
      out.append(buf, static_cast<size_t>(n));
    return out;
  }
  /// Waits (at most 10 s) for `part` to appear: woken by each write to the file.
  bool wait_for(const std::string& part) const {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (text().find(part) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{written_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) > 0) {
        char events[4096];
        while (::read(written_, events, sizeof events) > 0) {
        }
      }
    }
    return true;
  }

 private:
  int saved_ = -1;
  int reader_ = -1;
  int written_ = -1;  // inotify: the file was written
};

}  // namespace

TEST_CASE("RefusalLog shows a burst of lines per period and counts the rest",
          "[net][connection_server]") {
  test::TempDir dir;
  StderrCapture err(dir);
  net::RefusalLog log(3, std::chrono::seconds(3600));
  for (int i = 0; i < 10; ++i)
    log.say("refused " + std::to_string(i));
  err.restore();
  std::istringstream in(err.text());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  CHECK(lines == std::vector<std::string>{"refused 0", "refused 1", "refused 2"});
  CHECK(log.suppressed_total() == 7);
}

// A door's acceptor thread was not supervised: an exception on it (a check that throws, a
// thread that cannot be made) ended the process, a poll error ended the door silently,
// and a process out of descriptors spun on a listener it could not accept from. Now each
// is named on stderr and the door goes on serving.
TEST_CASE("ConnectionServer is supervised: a failing acceptor or handler stops no door",
          "[net][connection_server]") {
  test::TempDir dir;
  StderrCapture err(dir);
  std::atomic<int> checks{0}, served{0};
  uint16_t port = 0;
  auto listener = net::listen_on("127.0.0.1", port);
  REQUIRE(listener);
  net::DoorOptions door;
  door.accept_check = [&](const net::Socket&) -> core::Status {
    if (checks++ == 0) throw std::runtime_error("the check broke");
    return {};
  };
  auto server = net::ConnectionServer::start(
      std::move(*listener), port,
      [&](net::Socket& sock, const std::string&) {
        if (served++ == 0) throw std::runtime_error("the handler broke");
        net::send_all(sock, "ok", 2);
      },
      {}, 4, door);
  REQUIRE(server);
  auto dial = [&] {
    auto s = net::connect_to("127.0.0.1", port, 5s);
    REQUIRE(s);
    return std::move(*s);
  };
  auto answered = [&](const net::Socket& s) {
    net::set_io_timeout(s, 10s);
    char ok[2] = {};
    return ::recv(s.fd(), ok, 2, MSG_WAITALL) == 2 && ok[0] == 'o';
  };
  // The check throws: that connection is closed, the acceptor started again.
  auto first = dial();
  CHECK(closed_by_server(first));
  CHECK(err.wait_for("its acceptor failed (the check broke); started again in 50 ms"));
  // The handler throws: that member is closed, the next one served.
  auto second = dial();
  CHECK(closed_by_server(second));
  CHECK(err.wait_for("failed (the handler broke): closed"));
  auto third = dial();
  CHECK(answered(third));

  // Out of descriptors: the door waits instead of spinning, and accepts once there are
  // some again. (The limit is lowered to what is open now plus a few, and filled.)
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  size_t open_now = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++open_now;
  }
  rlimit low = saved;
  low.rlim_cur = open_now + 16;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> filler;
  for (int fd; (fd = ::dup(0)) >= 0;)
    filler.push_back(fd);
  REQUIRE(errno == EMFILE);
  ::close(filler.back());  // one for the client's own socket
  filler.pop_back();
  // The client's socket takes the one left (no name lookup: that might open a file).
  net::Socket fourth(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fourth.valid());
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Queued by the kernel; the server cannot accept it yet.
  REQUIRE(::connect(fourth.fd(), reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
  CHECK(err.wait_for("accept: Too many open files: not accepting for 100 ms"));
  for (int fd : filler)
    ::close(fd);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  CHECK(answered(fourth));
  err.restore();
  INFO(err.text());
  CHECK(served == 3);
}
