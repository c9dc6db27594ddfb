#include "actors/dataset_iterator.hpp"

#include <deque>

#include "core/data/guard.hpp"
#include "net/wire.hpp"

namespace troupe::actors {

void dataset_iterator(caf::blocking_actor* self, DatasetIteratorOptions options) {
  std::unique_ptr<core::Iterator<core::Batch>> it;
  std::deque<std::optional<core::Batch>> ready;  // made ahead; an empty one marks the end
  bool ended = false;
  core::Status failed;
  auto guarded = [&](auto&& fn) {
    if (auto st = core::guard_user_data("dataset '" + options.name + "'", fn); !st)
      failed = st.error();
  };
  guarded([&] { it = options.fn(options.context, options.args).make_iterator(); });
  // Makes one batch (or notes the end, or the failure).
  auto produce = [&] {
    guarded([&] {
      auto b = it->next();
      if (!b) ended = true;
      ready.push_back(std::move(b));
    });
  };
  bool running = true;
  while (running) {
    auto on_next = [&](next_atom, uint32_t n) -> caf::result<BatchMsg> {
      BatchMsg out;
      while (out.batches.size() < n) {
        if (ready.empty() && !ended && failed.ok()) produce();
        if (ready.empty()) break;
        auto b = std::move(ready.front());
        ready.pop_front();
        if (!b) {
          out.ended = true;
          break;
        }
        out.batches.push_back(std::move(*b));
      }
      // An error is reported once what was made before it has been handed out.
      if (out.batches.empty() && !out.ended && !failed.ok()) return net::to_caf(failed.error());
      if (n == 0) return out;  // "are you built?": yes, and nothing failed
      if (ready.empty() && ended) out.ended = true;
      return out;
    };
    auto on_shutdown = [&](net::shutdown_atom) { running = false; };
    const bool ahead = !ended && failed.ok() && ready.size() < options.prefetch;
    // With room ahead and no request waiting, make the next batch now; a request that
    // arrives meanwhile waits for that one batch. (Not `after(0)`: CAF routes that timeout
    // through its clock thread, which cost ~100 us a batch.)
    if (ahead && !self->has_next_message()) {
      produce();
      continue;
    }
    self->receive(on_next, on_shutdown);
  }
}

}  // namespace troupe::actors
