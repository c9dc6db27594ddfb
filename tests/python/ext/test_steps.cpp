// A C++ extension of `import troupe` for tests/python: a step of its own, added to the
// registry the workers serve when the module is imported
// (include/troupe/python_extension.hpp). "test/label_mean" reads one batch of the
// per-worker iterator and returns its labels' sum as loss_sum (so fetch()'s "loss" is the
// batch's mean label) and its size as examples. "test/wait_until_cancelled" runs until the
// coordinator cancels it (another closure's error), a minute at most: a closure that a
// chief's join() or fetch() waits on for as long as a test needs.

#include <chrono>
#include <string>
#include <thread>

#include "troupe/python_extension.hpp"

namespace {

troupe::core::Expected<troupe::BatchStats> label_mean(troupe::StepContext& ctx,
                                                      troupe::PerWorkerDataset ds) {
  using troupe::core::Errc;
  using troupe::core::make_error;
  auto batch = ctx.next_batch(ds);
  if (!batch) return batch.error();
  if (!*batch) return make_error(Errc::out_of_range, "dataset '" + ds.name + "' ended");
  const troupe::core::Column* label = (*batch)->column("label");
  if (label == nullptr) return make_error(Errc::invalid_argument, "the batch has no label");
  double sum = 0.0;
  for (float v : label->floats)
    sum += v;
  for (int64_t v : label->ints)
    sum += static_cast<double>(v);
  troupe::BatchStats stats;
  stats.loss_sum = sum;
  stats.examples = (*batch)->size();
  stats.batches = 1;
  return stats;
}

troupe::core::Expected<troupe::BatchStats> wait_until_cancelled(troupe::StepContext& ctx,
                                                                troupe::PerWorkerDataset) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!ctx.cancelled() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a step has no event to wait on
  if (ctx.cancelled())
    return troupe::core::make_error(troupe::core::Errc::cancelled, "cancelled while waiting");
  troupe::BatchStats stats;
  stats.batches = 1;
  return stats;
}

}  // namespace

PYBIND11_MODULE(troupe_test_steps, m) {
  m.doc() = "steps for tests/python: test/label_mean, test/wait_until_cancelled";
  troupe::extension::worker_registry().add_step("test/label_mean", label_mean);
  troupe::extension::worker_registry().add_step("test/wait_until_cancelled", wait_until_cancelled);
}
