#pragma once

#include <optional>

#include <caf/all.hpp>

#include "core/data/dataset.hpp"
#include "core/data/example.hpp"
#include "core/runtime/registry.hpp"
#include "net/wire.hpp"

namespace troupe::actors {

/// Batches handed from a dataset_iterator to the worker in the same process; never
/// serialized. Fewer than asked for (perhaps none): the data has ended.
struct BatchMsg {
  std::vector<core::Batch> batches;
  bool ended = false;
};

/// How a worker's iterator of one registered dataset function is built.
struct DatasetIteratorOptions {
  std::string name;  // the registered dataset function, for errors
  Registry::DatasetFn fn;
  std::vector<char> args;  // what the dataset's creation carried
  core::InputContext context;
  /// Batches made ahead of the requests (prefetch depth; 0: only on request).
  size_t prefetch = 0;
};

using net::next_atom;

/// The actor that owns one worker's iterator of a dataset (TensorFlow's per-worker
/// iterator resource). It builds the dataset with the worker's InputContext and, while no
/// request waits, makes batches ahead up to the prefetch depth, on its own thread (spawn
/// it detached).
///   (next, n)  -> BatchMsg: the next n batches; fewer, and `ended`, once the data ends
///                 (and after). Asking for several at once spares a thread hand-off per
///                 step, which on a busy machine costs more than making the batch.
///   (shutdown) -> the actor quits
/// A dataset function or pipeline that throws fails every later `next` with an `internal`
/// error naming the dataset; the actor keeps answering.
void dataset_iterator(caf::blocking_actor* self, DatasetIteratorOptions options);

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::BatchMsg)
