#pragma once

// Keras's operations (keras.ops) as nodes of a model's graph. Keras 3 records every keras.ops
// call on a symbolic tensor of a Functional model as an operation node of config.json
// ({"module": "keras.src.ops.numpy", "class_name": "ExpandDims", "config": {"axis": 1},
// "inbound_nodes": [{"args": [<tensor>, ...], "kwargs": {...}}]}), its arguments tensors or
// constants (numbers, arrays baked into the file). Each operation here is made from that
// node by a factory registered under its class name (core/ops/registry.cpp), reads its
// arguments as Keras's operation of that name does, and computes with the generic kernels
// (core/backend.hpp): none has a kernel of its own.
//
// Keras's operations see whole tensors, the batch axis first: their axes count it (axis 1
// is the first axis of an example). An operation that would reduce, slice, or otherwise
// mix the examples of a batch is refused when the model is read, naming it.
//
//   auto op = ops::make_op("ExpandDims", config_json, args_json, kwargs_json);

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.hpp"
#include "core/graph/config_args.hpp"
#include "core/graph/json_guard.hpp"
#include "core/graph/operation.hpp"

namespace troupe::core::ops {

using graph::Call;
using graph::CallState;
using graph::Ref;
using graph::TensorSpec;
using graph::to_float;

/// A tensor's shape with the batch axis first, as Keras's operations see it; the batch's
/// size is kBatch until a step gives it.
using Dims = std::vector<int64_t>;
inline constexpr int64_t kBatch = -1;
/// [kBatch] + s.shape.
Dims batched(const TensorSpec& s);
/// "(None, 3, 4)".
std::string dims_text(const Dims& d);

/// One argument of an operation's call as the file records it.
struct Arg {
  enum class Kind { tensor, constant, list, none, slice, ellipsis };
  Kind kind = Kind::none;
  int tensor = -1;         // a tensor: its index among the call's tensor inputs
  nlohmann::json value;    // a constant: a number or bool, or {"value", "dtype"} of an array;
                           // a slice: {"start", "stop", "step"}
  std::vector<Arg> items;  // a list (or tuple)
};

/// Parses a call argument as the file records it (a node's "args" entry or "kwargs" value),
/// numbering the tensors it references in order: each tensor's "keras_history" is appended
/// to `tensors`, and its Arg holds its index there.
Expected<Arg> parse_arg(const nlohmann::json& v, std::vector<nlohmann::json>& tensors);

/// A constant argument as a float32 tensor of its own shape (a scalar: rank 0); an array of
/// another dtype (ints, bools) is converted. Anything else is an error naming `what`.
Expected<Tensor> constant_tensor(const Arg& a, const std::string& what);

/// What an operation's factory reads: its config's arguments (ConfigArgs: each read by name,
/// any left unread an error) and its call's arguments, positional or by keyword.
class OpConfig final : public graph::ConfigArgs {
 public:
  OpConfig(std::string class_name, const nlohmann::json& config, std::vector<Arg> args,
           std::map<std::string, Arg> kwargs);

  const std::string& class_name() const { return class_name_; }
  const std::string& name() const { return name_; }
  /// Call argument `index` (positional) or, where the call named it, `key`; null when the
  /// call has neither. Marks a keyword read.
  const Arg* arg(size_t index, const std::string& key);
  /// How many positional arguments the call has.
  size_t positional() const { return args_.size(); }
  /// Every keyword argument read, and every config argument (finish()); a tensor keyword
  /// argument the operation did not read is an error too.
  Status finish_call() const;
  /// "operation 'add' (Add): argument 'x2' <what>".
  Error arg_error(const std::string& arg, const std::string& what) const;

 private:
  std::string class_name_, name_;
  std::vector<Arg> args_;
  std::map<std::string, Arg> kwargs_;
  std::vector<std::string> read_kwargs_;
};

/// An operation's operand: one of its call's tensors, or a constant baked into the file.
struct Operand {
  int input = -1;   // the call's tensor input; -1: `constant`
  Tensor constant;  // float32 on the host, its own shape (no batch axis)

  bool is_tensor() const { return input >= 0; }
  /// From argument `a` (a tensor or a constant), or an error naming the argument.
  static Expected<Operand> from(const Arg& a, const OpConfig& c, const std::string& what);
};

/// The per-call state of an operation with operands: its constants' copies on the device
/// (remade with the state when the model moves, so none outlives its device).
struct OperandState : CallState {
  std::vector<Tensor> constants;
};

/// The base of Keras's operations: errors say "operation", axes count the batch axis.
class Op : public graph::Operation {
 public:
  using Operation::Operation;
  bool is_layer() const override { return false; }

 protected:
  /// `axis` (negative: from the end) of a tensor of `rank` axes, the batch's included, as
  /// an index in [1, rank); the batch axis, or one outside, is an error naming the op.
  Expected<int> axis(int64_t axis, int rank, const std::string& what = "axis") const;
  /// Operand `k`'s value in this step: the call's tensor (with its batch axis), or the
  /// constant on this operation's device (copied there once, kept in the call's
  /// OperandState).
  ConstTensorView value(const Operand& o, size_t k, const Call& c);
  /// Its dims as build() sees them.
  static Dims dims(const Operand& o, const std::vector<TensorSpec>& in);
  /// out = x with its axes permuted (out's axis a is x's axis perm[a]), on this device.
  void transpose(ConstTensorView x, const std::vector<int>& perm, Tensor& out);
  /// out = x broadcast to `to` (x's axes aligned right; a 1 stretches), on this device.
  void broadcast(ConstTensorView x, const Shape& to, Tensor& out);
  static std::vector<int> inverse(const std::vector<int>& perm);
};

/// An operation that permutes the axes of its one float input (transpose, swapaxes,
/// moveaxis): a strided copy forward, the inverse one back. Each says its permutation.
class Permutation : public Op {
 public:
  using Op::Op;
  std::vector<Kernel> kernels() const override { return {Kernel::copy_strided}; }
  std::unique_ptr<CallState> make_state() const override;
  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override;
  Status forward(Call& c) override;
  void backward(Call& c) override;

 protected:
  /// The permutation of the axes of a tensor of dims `x` (the batch axis first): result axis
  /// a is input axis perm[a]. An error names what is wrong; the batch axis must stay first.
  virtual Expected<std::vector<int>> permutation(const Dims& x) const = 0;

 private:
  std::vector<int> perm_;
};

/// NumPy's broadcasting of `shapes` (aligned right, a 1 stretching) where kBatch stands for
/// the batch's unknown size: it broadcasts with 1 and with itself only. The result must
/// keep the batch axis first. `what` names the operation in errors.
Expected<Dims> broadcast_dims(const graph::Operation& op, const std::vector<Dims>& shapes);

/// The per-example spec of a batched result (its first axis kBatch), or an error naming the
/// operation when it would not keep the examples apart.
Expected<TensorSpec> unbatched(const graph::Operation& op, const Dims& d, ColumnKind kind);

/// `d` with the step's batch size in place of kBatch.
Shape with_batch(const Dims& d, int64_t batch);

// ---- The registry (core/ops/registry.cpp).

using OpFactory = Expected<std::unique_ptr<graph::Operation>> (*)(OpConfig&);

/// Whether a node of `module` ("keras.src.ops.numpy") is a Keras operation rather than a
/// layer.
bool is_op_module(const std::string& module);
/// The operation of Keras class `class_name` from its node: config, and the call's args and
/// kwargs as the file holds them. An unknown class, or an argument Troupe does not
/// support, is an invalid_argument error naming the operation and what.
Expected<std::unique_ptr<graph::Operation>> make_op(const std::string& class_name,
                                                    const nlohmann::json& config,
                                                    std::vector<Arg> args,
                                                    std::map<std::string, Arg> kwargs);
/// Whether an operation of `class_name` with `config` reads integer ids (cast to int32):
/// a float Input feeding it is read as ids, as Keras casts.
bool op_reads_ids(const std::string& class_name, const nlohmann::json& config);
/// The class names make_op knows, sorted.
std::vector<std::string> op_classes();

}  // namespace troupe::core::ops
