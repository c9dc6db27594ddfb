#include "core/collective/engine.hpp"

#include <exception>

namespace troupe::collective {

using core::Errc;
using core::make_error;

Engine::~Engine() {
  std::deque<Item> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& item : dropped)
    item.outcome.set_value(make_error(
        Errc::cancelled, "collective '" + item.what + "' not run: its engine shut down"));
  if (thread_.joinable()) thread_.join();
}

Engine::Ticket Engine::submit(std::string what, Job job) {
  Item item{std::move(what), std::move(job), {}};
  Ticket ticket(item.outcome.get_future());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      item.outcome.set_value(make_error(
          Errc::cancelled, "collective '" + item.what + "' not run: its engine shut down"));
      return ticket;
    }
    queue_.push_back(std::move(item));
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_all();
  return ticket;
}

core::Status Engine::call(const std::string& what, const Job& job) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    if (failure_) {
      ++stats_.skipped;
      return skipped(what);
    }
    busy_ = true;
    ++stats_.called;
  }
  auto st = run(what, job);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended(what, st);
  }
  cv_.notify_all();
  return st;
}

core::Status Engine::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  core::Status first;
  if (failure_) first = *failure_;
  failure_.reset();
  failed_what_.clear();
  return first;
}

Engine::Stats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !busy_); });
    if (queue_.empty()) return;  // stopping, nothing left
    Item item = std::move(queue_.front());
    queue_.pop_front();
    if (failure_) {
      ++stats_.skipped;
      item.outcome.set_value(skipped(item.what));
      cv_.notify_all();
      continue;
    }
    busy_ = true;
    ++stats_.submitted;
    lock.unlock();
    auto st = run(item.what, item.job);
    lock.lock();
    ended(item.what, st);
    item.outcome.set_value(st);
    cv_.notify_all();
  }
}

core::Status Engine::run(const std::string& what, const Job& job) {
  try {
    return job();
  } catch (const std::exception& e) {
    return make_error(Errc::internal, "collective '" + what + "' threw: " + e.what());
  } catch (...) {
    return make_error(Errc::internal, "collective '" + what + "' threw a non-standard exception");
  }
}

core::Error Engine::skipped(const std::string& what) const {
  return core::Error{failure_->code, "collective '" + what + "' not run: '" + failed_what_ +
                                         "' before it failed: " + failure_->message};
}

void Engine::ended(const std::string& what, const core::Status& st) {
  busy_ = false;
  if (!st.ok() && !failure_) {
    failure_ = st.error();
    failed_what_ = what;
  }
}

}  // namespace troupe::collective
