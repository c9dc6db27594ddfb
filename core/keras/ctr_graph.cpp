#include "core/keras/ctr_graph.hpp"

#include <algorithm>

#include "core/keras/builtin_models.hpp"

namespace troupe::core::keras {

CtrGraph::CtrGraph(const CtrModelConfig& config, int64_t rows, bool keyed) : config_(config) {
  for (auto& [name, shape] : ctr_dense_variables(config_)) {
    names_.push_back(name);
    shapes_.push_back(shape);
  }
  for (int weighted = 0; weighted < 2; ++weighted) {
    Form& f = forms_[weighted];
    auto model = keras::build_keras_model(ctr_model_config(config_, rows, "", 0.0f, weighted == 1));
    TROUPE_ASSERT(model.ok(), "the built-in CTR model's Keras form does not build");
    f.model = std::move(*model);
    if (keyed)  // rows by raw 64-bit key: no range to check the ids against
      if (auto* l = f.graph().operation("embedding"))
        for (auto& w : l->weights())
          w.keyed = true;
    const auto& ws = f.graph().weights();
    for (const auto& name : names_) {
      const std::string path = ctr_graph_path(config_, name);
      if (path.empty() && name == "bias") {  // no dense features: the bias is this class's
        f.dense.push_back(kOwn);
        continue;
      }
      size_t w = 0;
      while (w < ws.size() && ws[w].path != path)
        ++w;
      TROUPE_ASSERT(w < ws.size(), ("CtrGraph: no graph weight for parameter " + name).c_str());
      f.dense.push_back(w);
    }
  }
}

Status CtrGraph::to(Device device, Precision precision) {
  for (auto& f : forms_)
    if (auto st = f.graph().to(device, precision); !st) return st;
  auto backend = backend_for(device);
  if (!backend) return backend.error();
  backend_ = *backend;
  bias_ = bias_.to(device);  // the same objects: parameters() points at them
  dbias_ = Tensor(bias_.shape(), DType::float32, device);
  one_ = Tensor(Shape{1, 1}, DType::float32, device);
  backend_->fill(one_, 1.0f);
  logits_ = Tensor();
  return {};
}

Status CtrGraph::feed(const Batch& b) {
  const bool weighted =
      std::any_of(b.values.begin(), b.values.end(), [](float v) { return v != 1.0f; });
  if (auto st = ctr_columns(config_, b, weighted, /*labels=*/false, columns_); !st) return st;
  form_ = &forms_[weighted ? 1 : 0];
  if (weighted)  // the dense weights are the plain form's (parameters() may change them in place)
    for (size_t i = 0; i < form_->dense.size(); ++i)
      if (form_->dense[i] != kOwn)
        graph().weights()[form_->dense[i]].weight().value.set(dense_value(i));
  return graph().feed(columns_);
}

const std::vector<int64_t>& CtrGraph::ids() const {
  return form_->model.graph->tables().front().ids;
}

Tensor& CtrGraph::dense_value(size_t i) {
  const size_t w = forms_[0].dense[i];
  return w == kOwn ? bias_ : forms_[0].graph().weights()[w].weight().value;
}

Tensor& CtrGraph::dense_grad(size_t i) {
  const size_t w = forms_[0].dense[i];
  return w == kOwn ? dbias_ : forms_[0].graph().gradient(w);
}

std::vector<Parameter> CtrGraph::parameters() {
  std::vector<Parameter> out;
  for (size_t i = 0; i < names_.size(); ++i)
    out.push_back({names_[i], &dense_value(i), &dense_grad(i)});
  return out;
}

Status CtrGraph::assign(std::vector<Tensor> values) {
  if (values.size() != names_.size())
    return make_error(Errc::internal, "CtrGraph: " + std::to_string(values.size()) +
                                          " values for " + std::to_string(names_.size()) +
                                          " variables");
  for (size_t i = 0; i < names_.size(); ++i) {
    Tensor& w = dense_value(i);
    if (values[i].shape() != shapes_[i])
      return make_error(Errc::internal, "variable '" + names_[i] + "' has shape " +
                                            values[i].shape().to_string() + ", the model " +
                                            shapes_[i].to_string());
    if (w.device() == values[i].device())
      w = std::move(values[i]);
    else
      w.set(values[i]);
  }
  return {};
}

Status CtrGraph::give_rows(ConstTensorView rows) {
  const int64_t n = static_cast<int64_t>(ids().size()), width = config_.row_width();
  if (rows.shape() != Shape{n, width})
    return make_error(Errc::internal, "CtrGraph: rows " + rows.shape().to_string() + " for " +
                                          std::to_string(n) + " ids of width " +
                                          std::to_string(width));
  // The table's rows where the graph computes (the buffer it held last step, reused).
  Tensor& held = graph().tables().front().rows;
  if (held.device() != graph().device() || held.shape() != rows.shape())
    held = Tensor(rows.shape(), DType::float32, graph().device());
  copy(rows, held);
  return {};
}

Expected<ConstTensorView> CtrGraph::forward(bool training) {
  if (auto st = graph().forward(training); !st) return st.error();
  if (!own_bias()) return graph().output(0);
  // logits = the graph's + bias, as a product with one (float32: exact) on any backend.
  const ConstTensorView z = graph().output(0);
  if (logits_.device() != z.device() || logits_.shape() != z.shape())
    logits_ = Tensor(z.shape(), DType::float32, z.device());
  backend_->dense_forward(z, one_, bias_, logits_, Precision::float32);
  return ConstTensorView(logits_);
}

void CtrGraph::backward(ConstTensorView dlogits) {
  graph().backward({dlogits});
  if (own_bias()) backend_->column_sums(dlogits, dbias_, /*accumulate=*/false);
  if (form_ == &forms_[0]) return;
  // The weighted form's dense gradients where parameters() points: the plain form's.
  for (size_t i = 0; i < names_.size(); ++i) {
    if (form_->dense[i] == kOwn) continue;
    const Tensor& g = graph().gradient(form_->dense[i]);
    Tensor& to = dense_grad(i);
    if (to.device() != g.device() || to.shape() != g.shape())
      to = Tensor(g.shape(), DType::float32, g.device());
    copy(g, to);
  }
}

std::vector<TensorView> CtrGraph::gradients() {
  std::vector<TensorView> out;
  for (size_t i = 0; i < names_.size(); ++i)
    out.push_back(dense_grad(i));
  for (auto& use : graph().tables())
    out.push_back(use.row_grads);
  return out;
}

std::vector<std::pair<std::string, ConstTensorView>> CtrGraph::dense_grads() {
  staging_.resize(names_.size());
  std::vector<std::pair<std::string, ConstTensorView>> out;
  for (size_t i = 0; i < names_.size(); ++i)
    out.emplace_back(names_[i], on(Device::cpu(), dense_grad(i), staging_[i]));
  return out;
}

ConstTensorView CtrGraph::row_grads() {
  return on(Device::cpu(), graph().tables().front().row_grads, host_rows_);
}

}  // namespace troupe::core::keras
