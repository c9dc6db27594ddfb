#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/assert.hpp"
#include "core/data/example.hpp"

namespace troupe::core {

/// Produces the elements of one pass over a dataset; nullopt at the end.
template <class T>
class Iterator {
 public:
  virtual ~Iterator() = default;
  virtual std::optional<T> next() = 0;
};

/// An input pipeline in the manner of tf.data: a cheap, copyable recipe from which any
/// number of independent iterators are made. Transformations return new datasets.
///
///   auto ds = from_vector(examples).shard(2, 0).shuffle(10000, 7).repeat();
///   auto batches = to_batches(ds, 64, /*drop_remainder=*/true).prefetch(2);
///   auto it = batches.make_iterator();
///   while (auto b = it->next()) train(*b);
template <class T>
class Dataset {
 public:
  using value_type = T;
  using Factory = std::function<std::unique_ptr<Iterator<T>>()>;

  explicit Dataset(Factory factory) : factory_(std::move(factory)) {}

  std::unique_ptr<Iterator<T>> make_iterator() const { return factory_(); }

  /// Every num_shards-th element, starting at index.
  Dataset shard(int64_t num_shards, int64_t index) const;
  /// Buffered random order: a uniformly random element of a buffer of `buffer_size` is
  /// emitted and replaced by the next input. Each new iterator (each epoch under repeat)
  /// draws a new order from (seed, iterator count) unless reshuffle_each_iteration is off.
  Dataset shuffle(size_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;
  /// `count` passes (forever when negative). An empty pass ends the repetition.
  Dataset repeat(int64_t count = -1) const;
  /// The first n elements.
  Dataset take(int64_t n) const;
  /// Groups of `size` consecutive elements; the last smaller group is dropped when
  /// drop_remainder is set.
  Dataset<std::vector<T>> batch(size_t size, bool drop_remainder = false) const;
  /// f applied to every element.
  template <class F>
  Dataset<std::invoke_result_t<F, T>> map(F f) const;
  /// The elements of f(element) for each element in turn, f returning a Dataset (as
  /// tf.data's flat_map: records of each file of a list of files).
  template <class F>
  auto flat_map(F f) const -> std::invoke_result_t<F, T>;
  /// The first complete pass is kept in memory; later iterators replay it.
  Dataset cache() const;
  /// Elements produced ahead on a background thread, up to `buffer_size` of them.
  Dataset prefetch(size_t buffer_size) const;

 private:
  Factory factory_;
};

/// A dataset over a shared, immutable vector (elements are copied out).
template <class T>
Dataset<T> from_vector(std::shared_ptr<const std::vector<T>> items);
template <class T>
Dataset<T> from_vector(std::vector<T> items) {
  return from_vector(std::make_shared<const std::vector<T>>(std::move(items)));
}

/// Batches of examples collated into Batch values.
inline Dataset<Batch> to_batches(const Dataset<Example>& ds, size_t size, bool drop_remainder) {
  return ds.batch(size, drop_remainder).map([](std::vector<Example> v) { return collate(v); });
}

// --- implementation -------------------------------------------------------------------

namespace detail {

template <class T, class Next>
class FnIterator final : public Iterator<T> {
 public:
  explicit FnIterator(Next next) : next_(std::move(next)) {}
  std::optional<T> next() override { return next_(); }

 private:
  Next next_;
};

template <class T, class Next>
std::unique_ptr<Iterator<T>> make_fn_iterator(Next next) {
  return std::make_unique<FnIterator<T, Next>>(std::move(next));
}

/// Runs an iterator on its own thread, keeping up to `capacity` elements ready. What the
/// input throws ends the production and is thrown again by next() once the elements made
/// before it have been taken (as if the input had thrown there).
template <class T>
class PrefetchIterator final : public Iterator<T> {
 public:
  PrefetchIterator(std::unique_ptr<Iterator<T>> input, size_t capacity)
      : capacity_(capacity), input_(std::move(input)) {
    thread_ = std::thread([this] { run(); });
  }
  ~PrefetchIterator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::optional<T> next() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !queue_.empty() || done_; });
    if (queue_.empty()) {
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
      return std::nullopt;
    }
    T item = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return item;
  }

 private:
  void run() {
    for (;;) {
      std::optional<T> item;
      try {
        item = input_->next();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
        break;
      }
      std::unique_lock<std::mutex> lock(mu_);
      if (!item) break;
      cv_.wait(lock, [this] { return queue_.size() < capacity_ || stop_; });
      if (stop_) break;
      queue_.push_back(std::move(*item));
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

  const size_t capacity_;
  std::unique_ptr<Iterator<T>> input_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> queue_;
  std::exception_ptr error_;
  bool done_ = false;
  bool stop_ = false;
  std::thread thread_;
};

template <class T>
struct CacheState {
  std::mutex mu;
  bool complete = false;
  std::shared_ptr<const std::vector<T>> items;
};

}  // namespace detail

template <class T>
Dataset<T> from_vector(std::shared_ptr<const std::vector<T>> items) {
  return Dataset<T>([items] {
    return detail::make_fn_iterator<T>([items, i = size_t{0}]() mutable -> std::optional<T> {
      if (i >= items->size()) return std::nullopt;
      return (*items)[i++];
    });
  });
}

template <class T>
Dataset<T> Dataset<T>::shard(int64_t num_shards, int64_t index) const {
  TROUPE_ASSERT(num_shards >= 1 && index >= 0 && index < num_shards, "shard index out of range");
  auto f = factory_;
  return Dataset([f, num_shards, index] {
    return detail::make_fn_iterator<T>([in = std::shared_ptr<Iterator<T>>(f()), num_shards, index,
                                        pos = int64_t{0}]() mutable -> std::optional<T> {
      while (auto item = in->next()) {
        if (pos++ % num_shards == index) return item;
      }
      return std::nullopt;
    });
  });
}

template <class T>
Dataset<T> Dataset<T>::shuffle(size_t buffer_size, uint64_t seed, bool reshuffle) const {
  TROUPE_ASSERT(buffer_size >= 1, "shuffle buffer must hold at least one element");
  auto f = factory_;
  auto epoch = std::make_shared<std::atomic<uint64_t>>(0);
  return Dataset([f, buffer_size, seed, reshuffle, epoch] {
    const uint64_t e = reshuffle ? epoch->fetch_add(1) : 0;
    std::seed_seq seq{seed, e};
    struct State {
      std::shared_ptr<Iterator<T>> in;
      std::vector<T> buffer;
      std::mt19937_64 rng;
      bool input_done = false;
    };
    auto st = std::make_shared<State>();
    st->in = f();
    st->rng.seed(seq);
    return detail::make_fn_iterator<T>([st, buffer_size]() -> std::optional<T> {
      while (!st->input_done && st->buffer.size() < buffer_size) {
        auto item = st->in->next();
        if (!item) {
          st->input_done = true;
          break;
        }
        st->buffer.push_back(std::move(*item));
      }
      if (st->buffer.empty()) return std::nullopt;
      std::uniform_int_distribution<size_t> pick(0, st->buffer.size() - 1);
      const size_t k = pick(st->rng);
      T out = std::move(st->buffer[k]);
      st->buffer[k] = std::move(st->buffer.back());
      st->buffer.pop_back();
      return out;
    });
  });
}

template <class T>
Dataset<T> Dataset<T>::repeat(int64_t count) const {
  auto f = factory_;
  return Dataset([f, count] {
    struct State {
      std::unique_ptr<Iterator<T>> in;
      int64_t passes = 0;
      bool pass_empty = true;
    };
    auto st = std::make_shared<State>();
    return detail::make_fn_iterator<T>([st, f, count]() -> std::optional<T> {
      for (;;) {
        if (!st->in) {
          if (count >= 0 && st->passes >= count) return std::nullopt;
          st->in = f();
          st->pass_empty = true;
        }
        if (auto item = st->in->next()) {
          st->pass_empty = false;
          return item;
        }
        st->in.reset();
        ++st->passes;
        if (st->pass_empty) return std::nullopt;  // an empty input repeats to nothing
      }
    });
  });
}

template <class T>
Dataset<T> Dataset<T>::take(int64_t n) const {
  auto f = factory_;
  return Dataset([f, n] {
    return detail::make_fn_iterator<T>(
        [in = std::shared_ptr<Iterator<T>>(f()), left = n]() mutable -> std::optional<T> {
          if (left <= 0) return std::nullopt;
          --left;
          return in->next();
        });
  });
}

template <class T>
Dataset<std::vector<T>> Dataset<T>::batch(size_t size, bool drop_remainder) const {
  TROUPE_ASSERT(size >= 1, "batch size must be at least 1");
  auto f = factory_;
  return Dataset<std::vector<T>>([f, size, drop_remainder] {
    return detail::make_fn_iterator<std::vector<T>>(
        [in = std::shared_ptr<Iterator<T>>(f()), size,
         drop_remainder]() -> std::optional<std::vector<T>> {
          std::vector<T> group;
          group.reserve(size);
          while (group.size() < size) {
            auto item = in->next();
            if (!item) break;
            group.push_back(std::move(*item));
          }
          if (group.empty() || (drop_remainder && group.size() < size)) return std::nullopt;
          return group;
        });
  });
}

template <class T>
template <class F>
Dataset<std::invoke_result_t<F, T>> Dataset<T>::map(F fn) const {
  using U = std::invoke_result_t<F, T>;
  auto f = factory_;
  return Dataset<U>([f, fn] {
    return detail::make_fn_iterator<U>(
        [in = std::shared_ptr<Iterator<T>>(f()), fn]() -> std::optional<U> {
          auto item = in->next();
          if (!item) return std::nullopt;
          return fn(std::move(*item));
        });
  });
}

template <class T>
template <class F>
auto Dataset<T>::flat_map(F fn) const -> std::invoke_result_t<F, T> {
  using Inner = std::invoke_result_t<F, T>;
  using U = typename Inner::value_type;
  auto f = factory_;
  return Inner([f, fn] {
    return detail::make_fn_iterator<U>(
        [outer = std::shared_ptr<Iterator<T>>(f()), fn,
         inner = std::shared_ptr<Iterator<U>>()]() mutable -> std::optional<U> {
          for (;;) {
            if (inner) {
              if (auto item = inner->next()) return item;
              inner.reset();
            }
            auto next = outer->next();
            if (!next) return std::nullopt;
            inner = fn(std::move(*next)).make_iterator();
          }
        });
  });
}

template <class T>
Dataset<T> Dataset<T>::cache() const {
  auto f = factory_;
  auto state = std::make_shared<detail::CacheState<T>>();
  return Dataset([f, state]() -> std::unique_ptr<Iterator<T>> {
    std::shared_ptr<const std::vector<T>> items;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->complete) items = state->items;
    }
    if (items) return from_vector(items).make_iterator();
    // Fill: pass elements through while recording them; the first pass to finish
    // publishes its record.
    struct Fill {
      std::unique_ptr<Iterator<T>> in;
      std::vector<T> record;
    };
    auto fill = std::make_shared<Fill>();
    fill->in = f();
    return detail::make_fn_iterator<T>([fill, state]() -> std::optional<T> {
      auto item = fill->in->next();
      if (item) {
        fill->record.push_back(*item);
        return item;
      }
      std::lock_guard<std::mutex> lock(state->mu);
      if (!state->complete) {
        state->items = std::make_shared<const std::vector<T>>(std::move(fill->record));
        state->complete = true;
      }
      return std::nullopt;
    });
  });
}

template <class T>
Dataset<T> Dataset<T>::prefetch(size_t buffer_size) const {
  TROUPE_ASSERT(buffer_size >= 1, "prefetch buffer must hold at least one element");
  auto f = factory_;
  return Dataset([f, buffer_size]() -> std::unique_ptr<Iterator<T>> {
    return std::make_unique<detail::PrefetchIterator<T>>(f(), buffer_size);
  });
}

}  // namespace troupe::core
