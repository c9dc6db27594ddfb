#pragma once

// The built-in click-through-rate models (core/nn/ctr_model.hpp's formulas) computed plainly
// on the host, one example and one field at a time, for the tests to check the model
// programs train (its Keras form's layer graph, core::keras::CtrGraph) against:
//
//   logit = b + sum_f w[id_f] x_f + u . dense
//           + 1/2 sum_k ((sum_f e_fk)^2 - sum_f e_fk^2)      (fm, deepfm; e_f = v[id_f] x_f)
//           + MLP(concat(e_1 .. e_F, dense))                  (deepfm, wide_deep)
//
// over rows [1 + k] of one table (column 0 is w, 1..k are v) that the caller gives for the
// batch's unique ids. Its variables are ctr_dense_variables()'s, initialized as the
// programs did before the graph (bias 0, u Glorot-uniform, the MLP as RefMlp).

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/data/example.hpp"
#include "core/nn/ctr_model.hpp"
#include "core/parameter.hpp"
#include "core/partitioner.hpp"

namespace troupe::test {

/// A plain MLP in loops, for references: Dense layers "dense_0".. ([in, out] kernels
/// Glorot-uniform seeded seed, seed + 1, ..., zero biases), ReLU but the last; forward
/// keeps what backward needs, backward leaves the parameters' gradients and returns the
/// input's.
class RefMlp {
 public:
  RefMlp(std::vector<int64_t> widths, uint64_t seed) : widths_(std::move(widths)) {
    for (size_t l = 0; l + 1 < widths_.size(); ++l) {
      const core::Shape ks{widths_[l], widths_[l + 1]}, bs{widths_[l + 1]};
      kernels_.push_back(core::initialize(
          ks, core::Initializer{core::Initializer::Kind::glorot_uniform, 0.0f, seed + l}));
      biases_.emplace_back(bs);
      dkernels_.emplace_back(ks);
      dbiases_.emplace_back(bs);
    }
  }
  std::vector<core::Parameter> parameters() {
    std::vector<core::Parameter> out;
    for (size_t l = 0; l < kernels_.size(); ++l) {
      const std::string name = "dense_" + std::to_string(l);
      out.push_back({name + "/kernel", &kernels_[l], &dkernels_[l]});
      out.push_back({name + "/bias", &biases_[l], &dbiases_[l]});
    }
    return out;
  }
  core::ConstTensorView forward(core::ConstTensorView x) {
    const int64_t n = x.shape()[0];
    acts_.assign(1, core::Tensor::from_view(x));
    for (size_t l = 0; l < kernels_.size(); ++l) {
      const int64_t in = widths_[l], out = widths_[l + 1];
      core::Tensor y(core::Shape{n, out});
      for (int64_t i = 0; i < n; ++i)
        for (int64_t o = 0; o < out; ++o) {
          double v = biases_[l][o];
          for (int64_t k = 0; k < in; ++k)
            v += static_cast<double>(acts_[l][i * in + k]) * kernels_[l][k * out + o];
          y[i * out + o] = l + 1 < kernels_.size() ? std::max(0.0f, static_cast<float>(v))
                                                   : static_cast<float>(v);
        }
      acts_.push_back(std::move(y));
    }
    return acts_.back();
  }
  core::ConstTensorView backward(core::ConstTensorView dy) {
    const int64_t n = dy.shape()[0];
    core::Tensor d = core::Tensor::from_view(dy);
    for (size_t l = kernels_.size(); l-- > 0;) {
      const int64_t in = widths_[l], out = widths_[l + 1];
      if (l + 1 < kernels_.size())  // through the ReLU
        for (int64_t i = 0; i < d.size(); ++i)
          if (acts_[l + 1][i] <= 0.0f) d[i] = 0.0f;
      dkernels_[l].fill(0.0f);
      dbiases_[l].fill(0.0f);
      core::Tensor dx(core::Shape{n, in});
      for (int64_t i = 0; i < n; ++i)
        for (int64_t o = 0; o < out; ++o) {
          const float g = d[i * out + o];
          dbiases_[l][o] += g;
          for (int64_t k = 0; k < in; ++k) {
            dkernels_[l][k * out + o] += acts_[l][i * in + k] * g;
            dx[i * in + k] += kernels_[l][k * out + o] * g;
          }
        }
      d = std::move(dx);
    }
    dx_ = std::move(d);
    return dx_;
  }

 private:
  std::vector<int64_t> widths_;
  std::vector<core::Tensor> kernels_, biases_, dkernels_, dbiases_, acts_;
  core::Tensor dx_;
};

class CtrReference {
 public:
  explicit CtrReference(core::CtrModelConfig c)
      : config_(std::move(c)), bias_(core::Shape{1}), dbias_(core::Shape{1}) {
    if (config_.dense > 0) {
      dense_w_ = core::initialize(
          core::Shape{config_.dense, 1},
          core::Initializer{core::Initializer::Kind::glorot_uniform, 0.0f, config_.seed});
      ddense_w_.resize(dense_w_.shape());
    }
    if (config_.has_dnn()) {
      std::vector<int64_t> widths{config_.fields * config_.dim + config_.dense};
      widths.insert(widths.end(), config_.hidden.begin(), config_.hidden.end());
      widths.push_back(1);
      dnn_ = std::make_unique<RefMlp>(widths, config_.seed + 1);
    }
  }

  /// The dense variables, named and ordered as ctr_dense_variables().
  std::vector<core::Parameter> parameters() {
    std::vector<core::Parameter> p{{"bias", &bias_, &dbias_}};
    if (config_.dense > 0) p.push_back({"dense_w", &dense_w_, &ddense_w_});
    if (dnn_)
      for (auto& q : dnn_->parameters())
        p.push_back({"dnn/" + q.name, q.value, q.grad});
    return p;
  }

  /// Logits [n, 1] of `b` (one id per field), with `rows` [u, row_width] the rows of its
  /// unique ids and `index` each id's row (core::unique_ids). The inputs must outlive
  /// backward().
  core::ConstTensorView forward(const core::Batch& b, const core::Tensor& rows,
                                const std::vector<int32_t>& index) {
    const int64_t n = b.size(), F = config_.fields, k = config_.dim, D = config_.dense;
    const int64_t W = config_.row_width();
    TROUPE_ASSERT(static_cast<int64_t>(b.ids.size()) == n * F &&
                      static_cast<int64_t>(index.size()) == n * F && rows.shape()[1] == W,
                  "CtrReference: the batch or rows do not fit the model");
    batch_ = &b;
    rows_ = &rows;
    index_ = &index;
    logits_.resize(core::Shape{n, 1});
    const bool emb = W > 1;
    if (emb) dnn_in_.resize(core::Shape{n, F * k + D});
    for (int64_t i = 0; i < n; ++i) {
      double logit = bias_[0];
      std::vector<double> sum(static_cast<size_t>(k), 0.0);
      double squares = 0.0;
      for (int64_t f = 0; f < F; ++f) {
        const float x = b.values[static_cast<size_t>(i * F + f)];
        const float* row = rows.data() + index[static_cast<size_t>(i * F + f)] * W;
        logit += static_cast<double>(row[0]) * x;
        for (int64_t j = 0; emb && j < k; ++j) {
          const float e = row[1 + j] * x;
          dnn_in_[i * (F * k + D) + f * k + j] = e;
          sum[static_cast<size_t>(j)] += e;
          squares += static_cast<double>(e) * e;
        }
      }
      for (int64_t j = 0; j < D; ++j) {
        const float d = b.features.data()[i * D + j];
        logit += static_cast<double>(d) * dense_w_[j];
        if (emb) dnn_in_[i * (F * k + D) + F * k + j] = d;
      }
      if (config_.has_fm()) {
        double sq_sum = 0.0;
        for (double s : sum)
          sq_sum += s * s;
        logit += 0.5 * (sq_sum - squares);
      }
      logits_[i] = static_cast<float>(logit);
    }
    if (dnn_) {
      const core::ConstTensorView out = dnn_->forward(dnn_in_);
      for (int64_t i = 0; i < n; ++i)
        logits_[i] += out[i];
    }
    return logits_;
  }

  /// The dense variables' gradients of d(loss)/d(logits) `dlogits`, and row_grads() [u,
  /// row_width] for the rows given to forward().
  void backward(core::ConstTensorView dlogits) {
    const core::Batch& b = *batch_;
    const int64_t n = b.size(), F = config_.fields, k = config_.dim, D = config_.dense;
    const int64_t W = config_.row_width(), stride = F * k + D;
    core::ConstTensorView ddnn_in;
    if (dnn_) ddnn_in = dnn_->backward(dlogits.reshaped(core::Shape{n, 1}));
    dbias_[0] = 0.0f;
    for (int64_t j = 0; j < D; ++j)
      ddense_w_[j] = 0.0f;
    row_grads_ = core::Tensor(core::Shape{rows_->shape()[0], W});
    for (int64_t i = 0; i < n; ++i) {
      const float g = dlogits[i];
      dbias_[0] += g;
      for (int64_t j = 0; j < D; ++j)
        ddense_w_[j] += g * b.features.data()[i * D + j];
      std::vector<float> sum(static_cast<size_t>(k), 0.0f);
      for (int64_t f = 0; f < F && W > 1; ++f)
        for (int64_t j = 0; j < k; ++j)
          sum[static_cast<size_t>(j)] += dnn_in_[i * stride + f * k + j];
      for (int64_t f = 0; f < F; ++f) {
        const float x = b.values[static_cast<size_t>(i * F + f)];
        float* grow = row_grads_.data() + (*index_)[static_cast<size_t>(i * F + f)] * W;
        grow[0] += g * x;
        for (int64_t j = 0; W > 1 && j < k; ++j) {
          float d = 0.0f;  // d(loss)/d(e_fj)
          if (config_.has_fm())
            d += g * (sum[static_cast<size_t>(j)] - dnn_in_[i * stride + f * k + j]);
          if (dnn_) d += ddnn_in[i * stride + f * k + j];
          grow[1 + j] += d * x;
        }
      }
    }
  }
  const core::Tensor& row_grads() const { return row_grads_; }

 private:
  core::CtrModelConfig config_;
  core::Tensor bias_, dbias_, dense_w_, ddense_w_;
  std::unique_ptr<RefMlp> dnn_;
  const core::Batch* batch_ = nullptr;
  const core::Tensor* rows_ = nullptr;
  const std::vector<int32_t>* index_ = nullptr;
  core::Tensor dnn_in_, logits_, row_grads_;
};

}  // namespace troupe::test
