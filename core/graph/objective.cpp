#include "core/graph/objective.hpp"

#include <cmath>

namespace troupe::core::graph {

namespace {

std::string columns_of(const Batch& batch) {
  std::string out;
  for (const auto& c : batch.columns)
    out += (out.empty() ? "" : ", ") + c.name;
  return out.empty() ? "none" : out;
}

// Classes per row of an output's predictions: its last axis (1 with none per example).
int64_t classes_of(const Graph& g, size_t i) {
  const auto& shape = g.outputs()[i].spec.shape;
  return shape.empty() ? 1 : shape.back();
}

}  // namespace

Objective::Objective(CompileConfig config, const Graph& graph)
    : config_(std::move(config)), names_(config_.history_names()) {
  TROUPE_ASSERT(config_.outputs.size() == graph.outputs().size(),
                "an Objective's compile config was read for another graph");
  const size_t n = config_.outputs.size();
  labels_.resize(n);
  for (size_t i = 0; i < n; ++i)
    labels_[i].column = n > 1 ? config_.outputs[i].output : std::string("label");
  sparse_metric_.assign(n, false);
  float_metric_.assign(n, false);
  states_.values.resize(names_.size());
  for (size_t k = 0; k < config_.metrics.size(); ++k) {
    const MetricSpec& m = config_.metrics[k];
    (m.kind == MetricKind::sparse_categorical_accuracy ? sparse_metric_ : float_metric_)[m.output] =
        true;
    if (m.kind == MetricKind::auc) {
      states_.values[1 + k].positives.assign(static_cast<size_t>(m.num_thresholds), 0);
      states_.values[1 + k].negatives.assign(static_cast<size_t>(m.num_thresholds), 0);
    }
  }
}

Status Objective::set_label_column(const std::string& output, std::string column) {
  for (size_t i = 0; i < config_.outputs.size(); ++i)
    if (config_.outputs[i].output == output) {
      labels_[i].column = std::move(column);
      return {};
    }
  return make_error(Errc::invalid_argument, "the model has no output '" + output + "'");
}

Status Objective::read_labels(size_t i, const Graph& g, const Batch& batch, bool sparse_loss) {
  Labels& l = labels_[i];
  const std::string& output = config_.outputs[i].output;
  const Column* col = batch.column(l.column);
  if (col == nullptr)
    return make_error(Errc::invalid_argument,
                      "output '" + output + "' takes its labels from '" + l.column +
                          "', which the data does not have (it has " + columns_of(batch) + ")");
  if (col->kind == ColumnKind::strings)
    return make_error(Errc::invalid_argument, "output '" + output + "': labels '" + l.column +
                                                  "' are strings; losses and metrics take numbers");
  const int64_t n = g.batch_size() * g.outputs()[i].spec.per_example();
  const int64_t c = classes_of(g, i), rows = n / c;
  const auto count = static_cast<int64_t>(col->size());
  const bool dense = (config_.outputs[i].loss && !sparse_loss) || float_metric_[i];
  const bool sparse = sparse_loss || sparse_metric_[i];
  const std::string shapes = "labels '" + l.column + "' of shape " + col->shape.to_string() +
                             " for predictions of shape " +
                             g.outputs()[i].spec.with_batch(g.batch_size()).to_string();
  if (dense && count != n)
    return make_error(Errc::invalid_argument,
                      "output '" + output + "': " + shapes +
                          " (its loss and metrics take one label per prediction)");
  if (sparse && count != rows)
    return make_error(Errc::invalid_argument,
                      "output '" + output + "': " + shapes +
                          " (sparse categorical losses and metrics take one class index per row)");
  if (col->kind == ColumnKind::floats) {
    l.host = col->floats.data();
  } else {
    l.floats.assign(col->ints.begin(), col->ints.end());
    l.host = l.floats.data();
  }
  if (!sparse_loss) return {};
  l.classes.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float v = l.host[r];
    if (!(v >= 0.0f && v < static_cast<float>(c) && v == std::floor(v)))
      return make_error(Errc::out_of_range, "output '" + output + "': label " + std::to_string(v) +
                                                " of row " + std::to_string(r) + " in '" +
                                                l.column + "' is not a class index below " +
                                                std::to_string(c));
    l.classes[static_cast<size_t>(r)] = static_cast<int32_t>(v);
  }
  return {};
}

Expected<double> Objective::train_step(Graph& g, const Batch& batch, float loss_scale,
                                       const std::function<void(size_t)>& weight_done) {
  return step(g, batch, loss_scale, true, weight_done);
}

Expected<double> Objective::test_step(Graph& g, const Batch& batch) {
  return step(g, batch, 1.0f, false);
}

Expected<double> Objective::step(Graph& g, const Batch& batch, float loss_scale, bool backward,
                                 const std::function<void(size_t)>& weight_done) {
  const size_t no = config_.outputs.size();
  // Every label first: an error leaves the states as they were.
  for (size_t i = 0; i < no; ++i) {
    const auto& loss = config_.outputs[i].loss;
    if (!loss && !sparse_metric_[i] && !float_metric_[i]) continue;
    if (auto st = read_labels(i, g, batch, loss && loss_takes_classes(loss->kind)); !st)
      return st.error();
  }
  auto backend = backend_for(g.device());
  if (!backend) return backend.error();
  const Device device = g.device();
  const int64_t examples = g.batch_size();

  double total = 0.0;
  doutputs_.assign(no, ConstTensorView{});
  size_t loss_state = 1 + config_.metrics.size();
  for (size_t i = 0; i < no; ++i) {
    const OutputCompile& o = config_.outputs[i];
    if (!o.loss) continue;
    Labels& l = labels_[i];
    const ConstTensorView pred = g.output(i);
    const bool sparse = loss_takes_classes(o.loss->kind);
    const ConstTensorView host =
        sparse ? ConstTensorView(l.classes.data(), Shape{static_cast<int64_t>(l.classes.size())},
                                 Device::cpu(), DType::int32)
               : ConstTensorView(l.host, pred.shape(), Device::cpu(), DType::float32);
    const ConstTensorView labels = on(device, host, l.device_labels);
    if (l.grad.device() != device)
      l.grad = Tensor(pred.shape(), DType::float32, device);
    else
      l.grad.resize(pred.shape());
    const double value =
        (*backend)->loss(o.loss->kind, pred, labels, l.grad, o.loss_weight * loss_scale);
    total += static_cast<double>(o.loss_weight) * value;
    doutputs_[i] = l.grad;
    if (!o.loss_name.empty()) {
      // Keras's per-output loss tracker: the unweighted loss, weighted by the batch's size.
      states_.values[loss_state].total += value * static_cast<double>(examples);
      states_.values[loss_state].count += examples;
      ++loss_state;
    }
  }
  states_.values[0].total += total * static_cast<double>(examples);
  states_.values[0].count += examples;

  // Metrics read the predictions on the host, before backward (which may reuse buffers).
  std::vector<const float*> preds(no, nullptr);
  for (size_t k = 0; k < config_.metrics.size(); ++k) {
    const MetricSpec& m = config_.metrics[k];
    const size_t i = m.output;
    if (preds[i] == nullptr) {
      const ConstTensorView pred = g.output(i);
      if (device.is_cpu()) {
        preds[i] = pred.data();
      } else {
        labels_[i].host_pred.resize(pred.shape());
        copy(pred, labels_[i].host_pred);
        preds[i] = labels_[i].host_pred.data();
      }
    }
    const int64_t c = classes_of(g, i);
    const int64_t rows = examples * g.outputs()[i].spec.per_example() / c;
    const int64_t label_count = m.kind == MetricKind::sparse_categorical_accuracy ? rows : rows * c;
    update_metric(m, preds[i], rows, c, labels_[i].host, label_count, states_.values[1 + k]);
  }
  if (backward) g.backward(doutputs_, weight_done);
  return total;
}

std::vector<std::pair<std::string, double>> Objective::results() const {
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < names_.size(); ++i)
    out.emplace_back(names_[i], states_.values[i].result());
  return out;
}

}  // namespace troupe::core::graph
