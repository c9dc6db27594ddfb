#pragma once

// Members served request by request instead of a thread each (ConnectionServer's pooled
// mode: the tensor channel of a PS task, which hundreds of workers keep a connection to).
// The pool's threads wait in one epoll set where every member waiting between requests
// is armed once (EPOLLONESHOT): the kernel wakes one thread per request, which serves it
// and arms the member again, so a request costs one wake-up, as on a thread of its own.
// Threads follow the requests in flight, not the connections open: a PS task of 512
// workers holds a handful, not 512.
//
// A peer slow within a request (a frame sent a byte at a time) holds one thread, for at
// most its socket's I/O timeout. While every thread is serving and none has ended a turn
// for `grow_after` (all held by slow peers, not merely slow to be scheduled), the
// watchdog starts one more, up to `max_threads`: slow peers cannot stall the others for
// long. A member idle past `idle_timeout` is closed (after Options::farewell).
//
//   auto pool = RequestPool::start(handle_one, {}, on_closed);
//   (*pool)->add(std::move(socket), peer, tls_key);   // TLS (with a key) on its first turn

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/expected.hpp"
#include "net/socket.hpp"

namespace troupe::net {

class RequestPool {
 public:
  /// Serves one request of a member whose socket is readable (or has TLS bytes buffered);
  /// false ends the connection.
  using Handler = std::function<bool(Socket& s, const std::string& peer)>;
  struct Options {
    size_t threads = 4;       // started at once
    size_t max_threads = 64;  // grown to while requests wait
    std::chrono::milliseconds grow_after{20};
    std::chrono::milliseconds idle_timeout{0};  // 0: members may idle for ever
    /// Said to a member closed for idling, before it is closed (on the watchdog's thread,
    /// its writes bounded to 100 ms).
    std::function<void(Socket& s, const std::string& peer)> farewell;
    /// The TLS handshake on a member's first turn (its key from the door), counted from
    /// its admission: a member that has not begun it by then is closed (Ended::tls).
    std::chrono::milliseconds tls_deadline{5000};
  };

  /// Why the pool closed a member, for Closed.
  enum class Ended { tls, failed, idle };
  using Closed = std::function<void(const std::string& peer, Ended why, const std::string& text)>;

  /// Starts `options.threads` threads and the watchdog; an error where they cannot be had.
  static core::Expected<std::unique_ptr<RequestPool>> start(Handler handler, Options options,
                                                            Closed closed);
  ~RequestPool();
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  /// Takes a member (TLS started on its first turn when `tls_key` is set). False once
  /// stopped (the socket is closed then).
  bool add(Socket s, std::string peer, std::string tls_key = {});
  /// Members held now.
  size_t size() const;
  /// Threads serving requests (the watchdog apart).
  size_t threads() const;
  /// Waits until no member is held, or `deadline`; whether none is.
  bool wait_empty(std::chrono::steady_clock::time_point deadline);
  /// Shuts every member down and joins the threads; a handler must return once its
  /// socket is shut down. Idempotent.
  void stop();

 private:
  RequestPool(Handler handler, Options options, Closed closed);
  struct Member {
    Socket socket;
    std::string peer;
    std::string tls_key;
    std::chrono::steady_clock::time_point last;  // its last request's end
    bool busy = false;                           // being served (not armed)
  };
  void run_loop();    // each thread: wait for a member's request, serve it, arm it again
  void watch_loop();  // grows the pool while every thread is held; closes idle members
  // Serves member `id` (busy) with the lock released, then arms or closes it.
  void serve_locked(uint64_t id, std::unique_lock<std::mutex>& lock);
  bool arm_locked(uint64_t id, const Member& m, bool first);  // false: not watched
  void close_idle_locked(std::unique_lock<std::mutex>& lock);
  void grow_locked();  // one more thread
  bool all_held_locked() const { return idle_threads_ == 0; }

  Handler handler_;
  Options options_;
  Closed closed_;
  int epoll_ = -1;
  int wake_[2] = {-1, -1};  // a pipe in the epoll set: readable once stopped
  mutable std::mutex mu_;
  std::condition_variable empty_cv_, watch_cv_;
  std::unordered_map<uint64_t, Member> members_;  // by id, the epoll events' data
  uint64_t next_id_ = 1;                          // 0: the pipe
  size_t idle_threads_ = 0;                       // waiting in epoll_wait
  uint64_t served_ = 0;                           // turns ended: the watchdog's sign of progress
  std::thread watchdog_;
  std::vector<std::thread> workers_;
  bool stopped_ = false;
};

}  // namespace troupe::net
