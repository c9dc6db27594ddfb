#pragma once

// Feeds a named pipe (FIFO) from a thread of the test: the writing end of a stream a reader
// under test consumes, with every wait bounded so that a reader that never comes, or dies
// half-way, fails the test instead of hanging it.

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace troupe::test {

class FifoFeeder {
 public:
  /// Makes the FIFO `path`, waits (at most `deadline`) for a reader to open it, then writes
  /// `pieces` in turn. Before piece i > 0 it waits until `ready(i)` holds (poke() wakes it),
  /// so a test can check that the reader returned what had arrived before the rest did.
  FifoFeeder(std::string path, std::vector<std::string> pieces,
             std::function<bool(size_t)> ready = {},
             std::chrono::milliseconds deadline = std::chrono::seconds(60))
      : path_(std::move(path)), until_(std::chrono::steady_clock::now() + deadline) {
    made_ = ::mkfifo(path_.c_str(), 0600) == 0;
    if (!made_) return;
    thread_ = std::thread(
        [this, pieces = std::move(pieces), ready = std::move(ready)] { feed(pieces, ready); });
  }
  ~FifoFeeder() { join(); }
  FifoFeeder(const FifoFeeder&) = delete;
  FifoFeeder& operator=(const FifoFeeder&) = delete;

  /// Whether the FIFO was made (false: the thread never started).
  bool made() const { return made_; }
  void poke() {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  /// Waits for the writer; true when every piece was written and every `ready` held in time.
  /// A reader that never came by the deadline: the writer's blocked open is released (by
  /// opening the reading end here) and it gives up.
  bool join() {
    if (!thread_.joinable()) return made_ && complete_;
    bool opened;
    {
      std::unique_lock<std::mutex> lock(mu_);
      opened = cv_.wait_until(lock, until_, [&] { return opened_; });
      if (!opened) abandoned_ = true;
    }
    const int release = opened ? -1 : ::open(path_.c_str(), O_RDONLY | O_NONBLOCK);
    thread_.join();
    if (release >= 0) ::close(release);
    return made_ && complete_;
  }

 private:
  void feed(const std::vector<std::string>& pieces, const std::function<bool(size_t)>& ready) {
    // A reader gone half-way makes write() fail with EPIPE rather than end the test process.
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
    const auto until = until_;
    int fd;
    do  // blocks until a reader opens the FIFO (or join() releases it)
      fd = ::open(path_.c_str(), O_WRONLY);
    while (fd < 0 && errno == EINTR);
    {
      std::lock_guard<std::mutex> lock(mu_);
      opened_ = fd >= 0 && !abandoned_;
      cv_.notify_all();
    }
    if (fd < 0) return;
    if (!opened_) {
      ::close(fd);
      return;
    }
    ::fcntl(fd, F_SETFL, O_NONBLOCK);  // writes below wait in poll(), bounded
    bool ok = true;
    for (size_t i = 0; i < pieces.size() && ok; ++i) {
      if (i > 0 && ready) {
        std::unique_lock<std::mutex> lock(mu_);
        ok = cv_.wait_until(lock, until, [&] { return ready(i); });
      }
      for (size_t done = 0; ok && done < pieces[i].size();) {
        const ssize_t n = ::write(fd, pieces[i].data() + done, pieces[i].size() - done);
        if (n > 0) {
          done += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR) ok = false;  // EPIPE: the reader left
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        pollfd p{fd, POLLOUT, 0};
        if (ok && (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0))
          ok = false;
      }
    }
    ::close(fd);
    complete_ = ok;
  }

  std::string path_;
  bool made_ = false;
  bool complete_ = false;
  bool opened_ = false, abandoned_ = false;  // under mu_
  std::chrono::steady_clock::time_point until_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace troupe::test
