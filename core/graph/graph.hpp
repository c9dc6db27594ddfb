#pragma once

// A model as a directed acyclic graph of operation calls (Keras's functional model): named
// inputs, named outputs, operations (Keras's layers, and its keras.ops operations) as nodes,
// a layer possibly called at several nodes. A step feeds a batch
// by input name, runs the host part (lookups, hashing, the embedding tables' unique ids),
// takes the tables' rows from its caller (a held table, or parameter servers), runs the
// device part forward in topological order and backward in reverse, and leaves each
// weight's gradient (a table's: its rows') for the caller to apply or push.
//
//   Graph g;
//   int x = g.add_input("features", {ColumnKind::floats, {4}});
//   auto h = g.call(make_dense(...), {x});            // layers from core/layers/
//   g.set_outputs({(*h)[0]}, {"score"});
//   g.feed(batch);                                   // by input name
//   for (auto& t : g.tables()) t.rows = ...;         // the rows of t.ids
//   g.forward(/*training=*/true, seed);
//   g.backward({dloss});                             // then g.gradient(i), t.row_grads

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/data/example.hpp"
#include "core/expected.hpp"
#include "core/graph/operation.hpp"

namespace troupe::core::graph {

/// A trainable or non-trainable variable of the graph: layer `layer`'s weight `index`,
/// named "<layer>/<weight>" ("dense_1/kernel").
struct WeightRef {
  Operation* layer = nullptr;  // the layer that has it
  size_t index = 0;
  std::string path;
  Weight& weight() const { return layer->weights()[index]; }
};

/// An embedding table's part in one step: the unique ids its calls read (ascending), the
/// rows of those ids that the caller provides before forward(), and their gradients after
/// backward().
struct TableUse {
  size_t weight = 0;  // in Graph::weights()
  std::vector<int64_t> ids;
  Tensor rows;       // [ids, width], set by the caller (any device: copied where needed)
  Tensor row_grads;  // [ids, width] on the graph's device after backward()
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // ---- Building ----
  /// A named input; returns its tensor's id.
  int add_input(std::string name, TensorSpec spec);
  /// Calls `op` on tensors `inputs` (ids): builds it (a layer's first call makes its
  /// weights) and returns the ids of its outputs. Errors name the operation.
  Expected<std::vector<int>> call(std::shared_ptr<Operation> op, const std::vector<int>& inputs);
  /// The model's outputs, named (Keras's output layer names); every output must be float.
  Status set_outputs(const std::vector<int>& tensors, std::vector<std::string> names);

  // ---- What the graph is ----
  struct Input {
    std::string name;
    TensorSpec spec;
    int tensor = 0;
  };
  struct Output {
    std::string name;
    TensorSpec spec;
    int tensor = 0;
  };
  const std::vector<Input>& inputs() const { return inputs_; }
  const std::vector<Output>& outputs() const { return outputs_; }
  /// The distinct operations (layers and keras.ops), in the order of their first call.
  const std::vector<std::shared_ptr<Operation>>& operations() const { return ops_; }
  Operation* operation(const std::string& name) const;
  /// Every weight, layer by layer in operations() order, each layer's in its own order.
  const std::vector<WeightRef>& weights() const { return weights_; }
  /// Trainable weights whose layer is trainable: what gets gradients.
  bool trains(const WeightRef& w) const;
  int64_t num_parameters() const;
  size_t num_nodes() const { return nodes_.size(); }
  /// The spec of tensor `id`.
  const TensorSpec& spec(int id) const { return specs_[static_cast<size_t>(id)]; }

  /// Moves the layers' weights (not tables) to `device`, computing there in `precision`;
  /// what the last step held is dropped.
  Status to(Device device, Precision precision = Precision::float32);
  Device device() const { return device_; }
  Precision precision() const { return precision_; }

  // ---- A step ----
  /// Takes the inputs from the batch's columns by name (a missing one, or one of another
  /// kind or per-example shape, is an error naming it and what the batch has), copies the
  /// float ones to the device, runs the host layers, and collects each table's ids.
  Status feed(const Batch& batch);
  /// For a graph of one float input and no host layers or tables (a classifier): `x`
  /// [batch, ...] as that input, used in place where it is on the graph's device (copied
  /// there otherwise; it must stay valid until backward()). Another number of values per
  /// example is an error naming the input; another kind of graph an internal error.
  Status feed(ConstTensorView x);
  /// After feed(): one per embedding table the graph reads, in weights() order.
  std::vector<TableUse>& tables() { return tables_; }
  int64_t batch_size() const { return batch_; }
  /// The device layers, in topological order. `seed` makes this step's dropout masks.
  Status forward(bool training, uint64_t seed = 0);
  /// Output i of the last forward (on the device).
  ConstTensorView output(size_t i) const;
  /// Back-propagates d(loss)/d(output i) for each output (an empty view: none), leaving
  /// gradient(w) for every weight trains() says, and each table's row_grads. With
  /// `weight_done`, calls weight_done(w) as soon as weight w's gradient is final (its
  /// layer's last call in the reverse order done; on a device: its kernels queued), for
  /// every such weight once, in gradient_order(): a data-parallel step reduces the late
  /// layers' gradients while the earlier ones are computed.
  void backward(const std::vector<ConstTensorView>& doutputs,
                const std::function<void(size_t)>& weight_done = {});
  /// The weights backward() reports final, in the order it reports them: the same every
  /// step (a replica that has no batch marks them in this order too).
  const std::vector<size_t>& gradient_order();
  /// Weight w's gradient from the last backward (its shape; on the device). Each stays at
  /// one address once the outputs are set.
  const Tensor& gradient(size_t w) const { return grads_[w]; }
  Tensor& gradient(size_t w) { return grads_[w]; }

  // ---- Where a step's time goes ----
  /// Wall time of each layer call, forward and backward, summed over the steps since the
  /// last take_profile(); the tables' rows copied to the device are the entry "(rows)".
  struct CallTime {
    std::string layer, class_name;
    double forward_s = 0, backward_s = 0;
  };
  /// With profiling on, the device is synchronized after every call it times: steps are
  /// slower, and each call's time is its own (bench_gpu --profile).
  void set_profiling(bool on);
  std::vector<CallTime> take_profile();

 private:
  struct Node {
    std::shared_ptr<Operation> op;
    std::vector<int> inputs, outputs;
    std::unique_ptr<CallState> state;
    Call call;
    bool host = false;
    int table = -1;     // an embedding call: its TableUse; index is this call's
    Tensor index;       // int32 on the device
    Tensor host_index;  // its staging on the host (a graph on a GPU)
    bool wants_grad = false;
  };
  // Which tensors need gradients: those on a path from a trained weight to an output; and
  // where each weight's gradient is final.
  void plan_backward();
  size_t layer_index(const Node& n) const;  // in ops_
  Status collect_tables();

  std::vector<Input> inputs_;
  std::vector<Output> outputs_;
  std::vector<TensorSpec> specs_;
  std::vector<int> producer_;  // node producing each tensor (-1: an input)
  std::vector<Node> nodes_;
  std::vector<std::shared_ptr<Operation>> ops_;
  std::vector<WeightRef> weights_;
  std::vector<size_t> first_weight_;  // per layer in ops_
  Device device_;
  Precision precision_ = Precision::float32;

  // Step state.
  int64_t batch_ = 0;
  std::vector<Ref> values_;  // per tensor
  std::vector<Tensor> fed_;  // per input: its float/int data
  std::vector<std::vector<std::string>> fed_strings_;
  std::vector<TableUse> tables_;
  // collect_tables()'s buffers, per table: every call's ids, and the index into the unique.
  std::vector<std::vector<int64_t>> all_ids_;
  std::vector<std::vector<int32_t>> all_index_;
  std::vector<std::vector<int>> table_reads_;                 // each table's calls' id tensors
  std::vector<std::pair<const int64_t*, size_t>> table_ids_;  // each table's ids, this step
  std::vector<size_t> table_owner_;       // the table whose deduplication each uses
  std::vector<size_t> table_of_weight_;   // weights_ index -> tables_ index (or npos)
  std::vector<Tensor> grads_;             // per weight
  std::vector<Tensor> scratch_grads_;     // per weight: a shared layer's later calls
  std::vector<Tensor> tensor_grads_;      // per tensor: sums where a tensor fans out
  std::vector<ConstTensorView> dvalues_;  // per tensor, during backward
  std::vector<bool> needs_grad_;          // per tensor
  std::vector<size_t> final_at_;          // per weight: the node after whose backward its
                                          // gradient is final (npos: none reaches it)
  std::vector<size_t> gradient_order_;
  std::vector<Tensor> zeros_;  // per tensor: for outputs no gradient reached
  bool planned_ = false;
  bool forwarded_ = false;
  std::vector<CallTime> profile_;  // per node, then "(rows)"; empty: profiling off
  // With profiling on, syncs the device and adds the time since `from` to `into`.
  void timed(double& into, std::chrono::steady_clock::time_point from);
};

}  // namespace troupe::core::graph
