#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "core/expected.hpp"
#include "core/runtime/codec.hpp"

namespace troupe {

namespace detail {

/// The shared state behind a RemoteValue: fulfilled exactly once, by the coordinator.
struct RemoteState {
  enum class Status { pending, ready, failed, cancelled };

  std::mutex mu;
  std::condition_variable cv;
  Status status = Status::pending;
  std::vector<char> bytes;
  core::Error error;

  /// Moves the state out of pending; later calls are ignored (exactly-once fulfilment).
  bool settle(Status s, std::vector<char> value, core::Error e) {
    std::lock_guard<std::mutex> lock(mu);
    if (status != Status::pending) return false;
    status = s;
    bytes = std::move(value);
    error = std::move(e);
    cv.notify_all();
    return true;
  }
};

}  // namespace detail

/// The result of a scheduled closure, as tf.distribute's RemoteValue: not ready until a
/// worker has run the closure; then its value, its error, or `cancelled`.
///
///   RemoteValue<float> loss = coordinator.schedule<float>("train_step", ds);
///   coordinator.join();
///   float l = loss.fetch().value();
template <class T>
class RemoteValue {
 public:
  RemoteValue() = default;
  explicit RemoteValue(std::shared_ptr<detail::RemoteState> state) : state_(std::move(state)) {}

  bool ready() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->status != detail::RemoteState::Status::pending;
  }
  /// Waits at most `timeout` for the closure to be settled; returns whether it is.
  bool wait_for(std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lock(state_->mu);
    return state_->cv.wait_for(
        lock, timeout, [&] { return state_->status != detail::RemoteState::Status::pending; });
  }
  /// Waits for the closure and returns its value; a failed closure gives its error, a
  /// cancelled one a `cancelled` error.
  core::Expected<T> fetch() const {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->status != detail::RemoteState::Status::pending; });
    switch (state_->status) {
      case detail::RemoteState::Status::ready:
        return decode<T>(state_->bytes);
      case detail::RemoteState::Status::cancelled:
        return core::make_error(core::Errc::cancelled,
                                "closure cancelled: " + state_->error.message);
      default:
        return state_->error;
    }
  }

 private:
  std::shared_ptr<detail::RemoteState> state_;
};

}  // namespace troupe
