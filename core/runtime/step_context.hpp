#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "core/data/example.hpp"
#include "core/expected.hpp"
#include "core/tensor.hpp"

namespace troupe {

/// A per-worker dataset, passed to a step as an argument: each worker substitutes its own
/// iterator (built by the registered dataset function with that worker's InputContext).
struct PerWorkerDataset {
  std::string name;
  MSGPACK_DEFINE(name);
};

/// What a step function sees of the worker running it: the parameter servers and its
/// per-worker datasets. Requests fan out to every shard at once and each has a timeout.
class StepContext {
 public:
  virtual ~StepContext() = default;

  virtual int worker_index() const = 0;
  /// The id of the closure being run; pushes are tagged with it.
  virtual uint64_t closure_id() const = 0;
  /// True once the coordinator has cancelled this closure (another closure's error ended
  /// the work): a long step should return soon, e.g. with core::Errc::cancelled. PS
  /// requests of a cancelled closure fail with `cancelled` without being sent.
  virtual bool cancelled() const { return false; }

  /// The current values of whole variables (shards concatenated), in the order asked.
  virtual core::Expected<std::vector<core::Tensor>> pull(const std::vector<std::string>& names) = 0;
  /// Pushes dense gradients, one per named variable, split across its shards.
  virtual core::Status push(
      const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) = 0;
  /// Pushes dense gradients and returns each variable's value after its shards applied
  /// them: one round trip per shard instead of a push and a later pull.
  virtual core::Expected<std::vector<core::Tensor>> push_pull(
      const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) = 0;
  /// Rows of a variable (indices of the full variable), gathered from their shards.
  core::Expected<core::Tensor> pull_rows(const std::string& name,
                                         const std::vector<int64_t>& rows) {
    auto got = pull_rows(std::vector<RowsOf>{{name, &rows, {}}});
    if (!got) return got.error();
    return std::move(got->front());
  }
  /// Pushes gradients of rows (indices of the full variable, [rows, width] values).
  core::Status push_rows(const std::string& name, const std::vector<int64_t>& rows,
                         core::ConstTensorView grads) {
    return push_rows(std::vector<RowsOf>{{name, &rows, grads}});
  }

  /// Rows of a variable: its name, the row indices (not owned) and, for a push, their
  /// gradients ([rows, width]).
  struct RowsOf {
    std::string name;
    const std::vector<int64_t>* rows = nullptr;
    core::ConstTensorView grads;
  };
  /// The rows of several variables at once (one tensor each, in order): one request per
  /// PS task that holds any of them, all in flight together.
  virtual core::Expected<std::vector<core::Tensor>> pull_rows(const std::vector<RowsOf>& vars) = 0;
  /// Pushes the row gradients of several variables at once, one request per PS task.
  virtual core::Status push_rows(const std::vector<RowsOf>& vars) = 0;

  /// The next batch of this worker's iterator of `ds`; nullopt at its end.
  virtual core::Expected<std::optional<core::Batch>> next_batch(const PerWorkerDataset& ds) = 0;
};

}  // namespace troupe
