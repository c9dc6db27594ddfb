#pragma once

// A node of a model's graph (core/graph/graph.hpp), as Keras has them: an operation with
// inputs, outputs, an explicit forward and backward through the backend of the device it
// computes on, and the shapes it checks when called. A Keras layer (core/layers) is an
// operation with weights; a Keras operation (keras.ops, core/ops) one without. A layer may be
// called at several nodes of a graph (a shared layer): what one call keeps between its
// forward and its backward lives in that call's CallState, never in the operation, and each
// call writes its own weight gradients where the graph tells it (the graph sums them).
//
//   class Scale final : public Operation {       // y = 2x, no weights
//     Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
//       return in;
//     }
//     std::vector<Kernel> kernels() const override { return {Kernel::axpby}; }
//     Status forward(Call& c) override { ... backend().axpby(2, x, 0, y) ... }
//     void backward(Call& c) override { ... }
//   };

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/expected.hpp"
#include "core/graph/tensor_spec.hpp"
#include "core/partitioner.hpp"

namespace troupe::core::graph {

/// A variable of a layer (an operation with weights), named as Keras names it ("kernel", "bias",
/// "embeddings", "gamma", "moving_mean"), in the order Keras saves them (trainable ones first, each
/// in creation order, then the non-trainable ones).
struct Weight {
  std::string name;
  Tensor value;  // on the layer's device; an embedding table's on the host, or not held
  bool trainable = true;
  Initializer init;  // its starting value when no weights file gives one
  /// An embedding table: read and updated by the rows a batch uses (Graph::tables()), so
  /// it may live elsewhere (on parameter servers) and `value` be empty.
  bool table = false;
  /// A table whose ids are raw 64-bit keys (a dynamic table on parameter servers), not row
  /// numbers below shape[0].
  bool keyed = false;
  Shape shape;  // the full shape, also when `value` is not held
};

/// What one call keeps from its forward for its backward (saved activations, scratch,
/// a backend's workspace). Made by Layer::make_state once per node.
class CallState {
 public:
  virtual ~CallState() = default;
};

/// One call of an operation in a step: its inputs and outputs, and the gradients flowing back.
struct Call {
  std::vector<Ref> inputs;
  /// Set by forward: views of the call's own buffers (in its CallState) or of its inputs,
  /// valid until the next forward of this node.
  std::vector<Ref> outputs;
  bool training = false;
  /// This call's seed for this step (dropout draws from it).
  uint64_t seed = 0;
  CallState* state = nullptr;

  // The call of an operation that has a table (Weight::table, read by rows): the table's
  // rows this step reads ([u, width], on the device) and, for each of the call's ids in
  // order, the index of its row among them (int32 on the device).
  ConstTensorView table_rows;
  ConstTensorView table_index;

  // Backward.
  /// d(loss)/d(output) for each float output (zeros where none reached it).
  std::vector<ConstTensorView> doutputs;
  /// Whether each input wants its gradient (float inputs on a path to a trainable weight).
  std::vector<bool> want_dinputs;
  /// Set by backward: d(loss)/d(input) where wanted (views of the call's own buffers, or of
  /// doutputs for operations that only reshape), empty elsewhere.
  std::vector<ConstTensorView> dinputs;
  /// Where each weight's gradient goes, in weights() order: written (not added to), placed
  /// to the weight's shape by the operation; null when not wanted. A table's is its row
  /// gradient [u, width], one row per row of `table_rows`.
  std::vector<Tensor*> dweights;
};

class Operation {
 public:
  Operation(std::string class_name, std::string name)
      : class_name_(std::move(class_name)), name_(std::move(name)) {}
  virtual ~Operation() = default;
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  /// Keras's class name ("Dense", "ExpandDims") and the node's name in its model
  /// ("dense_1", "expand_dims").
  const std::string& class_name() const { return class_name_; }
  const std::string& name() const { return name_; }
  /// A Keras layer (its errors say "layer"), or an operation of keras.ops ("operation").
  virtual bool is_layer() const { return true; }
  /// Keras's `trainable`: a frozen layer's weights get no gradient.
  bool trainable() const { return trainable_; }
  void set_trainable(bool t) { trainable_ = t; }

  /// Checks the inputs of one call and gives its outputs' specs. The first call makes the
  /// weights (Keras's build); a later call (a shared layer) must fit them. Errors name the
  /// operation (error()).
  virtual Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& inputs) = 0;
  /// The backend kernels its forward and backward call: a model is placed on a device only
  /// where the backend has every one (Backend::has), so a missing kernel is an error naming
  /// the node before training, never an abort inside a step. Asked after build().
  virtual std::vector<Kernel> kernels() const = 0;
  virtual std::unique_ptr<CallState> make_state() const { return std::make_unique<CallState>(); }
  /// Computes c.outputs from c.inputs. An error is data the operation cannot take (an id
  /// outside its table, a string it cannot hash), naming it and the value.
  virtual Status forward(Call& c) = 0;
  /// Computes c.dinputs (where wanted) and the weights' gradients (where c.dweights asks)
  /// from c.doutputs, for the call whose forward ran last on c.state.
  virtual void backward(Call& c) = 0;
  /// An operation that computes on the host before the device part of a step (lookups and
  /// hashing of ids and strings, shapes of ids): its forward runs when the batch is fed; it
  /// has no backward. Asked after build().
  virtual bool on_host() const { return false; }
  /// Whether the output depends on `training` (Dropout, BatchNormalization).
  virtual bool uses_training() const { return false; }
  /// Whether gradients flow through it: a comparison, Argmax or Sign is piecewise constant,
  /// so nothing before it gets a gradient from its outputs (its backward is never called).
  virtual bool differentiable() const { return true; }

  std::vector<Weight>& weights() { return weights_; }
  const std::vector<Weight>& weights() const { return weights_; }
  /// An error when build() asked for a weight over Troupe's limits (tensor_spec.hpp),
  /// naming it: that weight was not allocated, and the graph refuses the call.
  const Status& weight_status() const { return weight_status_; }

  /// Moves the weights (not the tables) to `device` and computes there in `precision`
  /// (matrix products only; everything else float32). An unservable device, or one whose
  /// backend lacks a kernel of kernels(), is an error naming the node and the kernel.
  Status to(Device device, Precision precision = Precision::float32);
  Device device() const { return device_; }
  Precision precision() const { return precision_; }

  /// "layer 'dense_1' (Dense): <what>" (an operation: "operation 'sum' (Sum): <what>") as an
  /// invalid_argument error.
  Error error(const std::string& what) const;

 protected:
  Backend& backend() const { return *backend_; }
  /// Adds a weight (Keras's add_weight) holding `init`'s values on this layer's device.
  Weight& add_weight(std::string name, Shape shape, Initializer init, bool trainable = true);
  /// Adds an embedding table: its values are not made here (Graph::hold_tables does).
  Weight& add_table(std::string name, Shape shape, Initializer init);
  /// `t` with `shape` on this operation's device (made there if it lives elsewhere);
  /// contents unspecified; keeps its allocation when large enough.
  Tensor& place(Tensor& t, const Shape& shape, DType dtype = DType::float32);

 private:
  std::string class_name_;
  std::string name_;
  bool trainable_ = true;
  std::vector<Weight> weights_;
  Status weight_status_;
  Device device_;
  Precision precision_ = Precision::float32;
  Backend* backend_ = &cpu_backend();
};

/// A float input's view as a [rows, last] matrix (rank >= 1; a rank-1 value is [n, 1]).
ConstTensorView as_rows(ConstTensorView v);
TensorView as_rows(TensorView v);

}  // namespace troupe::core::graph
