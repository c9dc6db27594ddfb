#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

namespace troupe::net {

/// A number of bytes that connections share: each reserves what a frame announces before
/// allocating it and gives it back when the frame is answered, so the frames held at once
/// never take more than the budget, however many connections send them.
class ByteBudget {
 public:
  explicit ByteBudget(uint64_t capacity) : capacity_(capacity) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  /// Bytes held until destroyed (or moved from); an empty lease holds none.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept {
      if (this != &o) {
        release();
        budget_ = o.budget_;
        bytes_ = o.bytes_;
        o.budget_ = nullptr;
      }
      return *this;
    }
    ~Lease() { release(); }
    uint64_t bytes() const { return budget_ != nullptr ? bytes_ : 0; }
    void release() {
      if (budget_ != nullptr) budget_->give_back(bytes_);
      budget_ = nullptr;
    }

   private:
    friend class ByteBudget;
    Lease(ByteBudget* b, uint64_t n) : budget_(b), bytes_(n) {}
    ByteBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  enum class Outcome { granted, timed_out, too_large };
  /// Reserves `n` bytes, waiting at most `wait` for others to give enough back. More than
  /// the capacity is never granted (`too_large`, at once).
  Outcome reserve(uint64_t n, std::chrono::milliseconds wait, Lease& lease) {
    if (n > capacity_) return Outcome::too_large;
    std::unique_lock<std::mutex> lock(mu_);
    if (!room_.wait_for(lock, wait, [&] { return capacity_ - held_ >= n; }))
      return Outcome::timed_out;
    held_ += n;
    lock.unlock();
    changed_.notify_all();
    lease = Lease(this, n);
    return Outcome::granted;
  }

  /// Waits at most `bound` until what is held satisfies `pred`; returns whether it did.
  bool wait_held(const std::function<bool(uint64_t)>& pred, std::chrono::milliseconds bound) const {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, bound, [&] { return pred(held_); });
  }

  uint64_t capacity() const { return capacity_; }
  uint64_t held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }

 private:
  void give_back(uint64_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ -= n;
    }
    room_.notify_all();
    changed_.notify_all();
  }

  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable room_;
  mutable std::condition_variable changed_;  // on every reserve and give-back
  uint64_t held_ = 0;
};

}  // namespace troupe::net
