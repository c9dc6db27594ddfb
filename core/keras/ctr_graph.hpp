#pragma once

// The built-in click-through-rate model (core::CtrModelConfig: LR, FM, DeepFM, Wide&Deep)
// trained as its Keras form's layer graph (builtin_models.hpp) over the variables the
// programs store: the dense ones under ctr_dense_variables()'s names and shapes, and the
// table (column 0 the linear term's, columns 1..dim the factors'), the form's Embedding. Programs
// that keep those variables on parameter servers or in snapshots (ctr_ps, ctr_fit, `troupe export`)
// so run the graph engine without changing what they store. Batches are the sparse readers' (each
// example `fields` ids with their values, `dense` features): the plain form runs when every value
// is 1 (Criteo's, ctr_datagen's), the weighted one (each id's rows times its value) otherwise.
//
//   CtrGraph m(config, rows, /*keyed=*/false);
//   m.feed(batch);                                  // then m.ids(): its unique ids
//   m.assign(dense_values);                         // in m.names() order
//   m.give_rows(rows_of_ids);                       // [ids, row_width]
//   auto logits = m.forward(/*training=*/true);     // [n, 1]
//   m.backward(dlogits);
//   m.dense_grads(); m.row_grads();                 // for the variables
//
// One thread at a time.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/data/example.hpp"
#include "core/expected.hpp"
#include "core/keras/keras_model.hpp"
#include "core/nn/ctr_model.hpp"
#include "core/parameter.hpp"
#include "core/tensor.hpp"

namespace troupe::core::keras {

class CtrGraph {
 public:
  /// The model of `config` over a table of `rows` rows; `keyed`: rows by raw 64-bit key (a
  /// dynamic table), the ids not checked against `rows`. With dense features the bias is
  /// the dense term's (dense_linear/bias); without them the Keras form has no weight of
  /// its own for it (an export folds it in), so this class holds it and adds it to the
  /// graph's output.
  CtrGraph(const CtrModelConfig& config, int64_t rows, bool keyed);

  const CtrModelConfig& config() const { return config_; }
  /// The dense variables, named and ordered as ctr_dense_variables(), and their shapes.
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<Shape>& shapes() const { return shapes_; }

  /// Moves both forms to `device`, computing in `precision`.
  Status to(Device device, Precision precision);
  /// Feeds a batch to the form it needs; ids() are then its unique ids, ascending. An
  /// example of another id or dense-feature count is an invalid_argument error naming it.
  Status feed(const Batch& sparse);
  const std::vector<int64_t>& ids() const;
  /// The dense weights from the variables' values, in names() order (moved in where they
  /// are on the model's device); both forms compute with them.
  Status assign(std::vector<Tensor> values);
  /// The dense parameters (names() order) with their gradients:
  /// each at one address for the model's life (an optimizer may update them in place).
  std::vector<Parameter> parameters();
  /// The rows of ids() in the table's layout, [ids, row_width] (any device); another shape
  /// is an internal error.
  Status give_rows(ConstTensorView rows);
  /// The logits of the fed batch, [n, 1] on the model's device.
  Expected<ConstTensorView> forward(bool training);
  void backward(ConstTensorView dlogits);
  /// Every gradient of the last backward pass, on the device (to unscale under loss
  /// scaling): the dense ones (parameters()'), then the table's rows'.
  std::vector<TensorView> gradients();
  /// The dense gradients on the host, named as the variables.
  std::vector<std::pair<std::string, ConstTensorView>> dense_grads();
  /// The rows' gradients on the host in the table's layout, [ids, row_width].
  ConstTensorView row_grads();
  /// The layer graph the last feed() chose (its form: plain or weighted), to profile it.
  graph::Graph& layer_graph() { return graph(); }

 private:
  struct Form {
    keras::KerasModel model;
    std::vector<size_t> dense;  // each dense variable's graph weight
    graph::Graph& graph() { return *model.graph; }
  };
  static constexpr size_t kOwn = static_cast<size_t>(-1);  // Form::dense: bias_, not the graph's
  bool own_bias() const { return config_.dense == 0; }
  graph::Graph& graph() { return form_->graph(); }
  // Dense parameter i's value and gradient: the plain form's, which the weighted one
  // copies its values from before a batch and its gradients to after one.
  Tensor& dense_value(size_t i);
  Tensor& dense_grad(size_t i);
  const graph::Graph& graph() const { return *form_->model.graph; }

  CtrModelConfig config_;
  Form forms_[2];  // plain, weighted
  Form* form_ = &forms_[0];
  std::vector<std::string> names_;
  std::vector<Shape> shapes_;
  Batch columns_;
  std::vector<Tensor> staging_;  // dense gradients copied to the host
  Tensor host_rows_;             // the rows' gradients copied to the host
  // Without dense features: the bias [1], its gradient, a [1, 1] one and the logits.
  Tensor bias_ = Tensor(Shape{1}), dbias_ = Tensor(Shape{1}), one_ = Tensor(Shape{1, 1}, 1.0f);
  Tensor logits_;
  Backend* backend_ = &cpu_backend();
};

}  // namespace troupe::core::keras
