#include "core/parallel.hpp"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe::core {

namespace {

// Helper threads that each run one chunk of the current job, then wait for the next.
class Pool {
 public:
  ~Pool() { resize(1); }

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  void resize(int threads) {
    std::lock_guard<std::mutex> no_job(busy_);  // no job runs while the helpers change
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : helpers_)
      t.join();
    helpers_.clear();
    stop_ = false;
    // New helpers start from the current job count: none is running, the next is theirs.
    const uint64_t now = generation_;
    for (int i = 1; i < threads; ++i)
      helpers_.emplace_back([this, i, now] { run(i, now); });
  }

  bool try_run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;  // nested or concurrent: the caller runs it alone
    const int64_t chunks =
        std::min<int64_t>(threads(), std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
    if (chunks <= 1) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      chunks_ = chunks;
      pending_ = chunks - 1;
      ++generation_;
    }
    cv_.notify_all();
    fn(0, n / chunks);  // chunk 0 on the caller's thread
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    fn_ = nullptr;
    return true;
  }

 private:
  void run(int index, uint64_t seen) {
    for (;;) {
      const std::function<void(int64_t, int64_t)>* fn = nullptr;
      int64_t begin = 0, end = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (index >= chunks_) continue;  // this job has fewer chunks than threads
        fn = fn_;
        begin = n_ * index / chunks_;
        end = n_ * (index + 1) / chunks_;
      }
      (*fn)(begin, end);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> helpers_;
  std::mutex busy_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunks_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

int intra_op_threads() {
  return pool().threads();
}

void set_intra_op_threads(int threads) {
  pool().resize(std::clamp(threads, 1, 256));
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (intra_op_threads() > 1 && pool().try_run(n, grain, fn)) return;
  fn(0, n);
}

}  // namespace troupe::core
