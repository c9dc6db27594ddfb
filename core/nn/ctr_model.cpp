#include "core/nn/ctr_model.hpp"

#include <algorithm>
#include <numeric>

#include "core/parallel.hpp"
#include "core/partitioner.hpp"

namespace troupe::core {

namespace {
constexpr int64_t kExampleGrain = 64;  // examples per intra-op chunk at least
}  // namespace

Expected<CtrKind> parse_ctr_kind(const std::string& name) {
  if (name == "lr" || name == "logistic") return CtrKind::logistic;
  if (name == "fm") return CtrKind::fm;
  if (name == "deepfm") return CtrKind::deepfm;
  if (name == "wide_deep") return CtrKind::wide_deep;
  return make_error(Errc::invalid_argument,
                    "unknown CTR model '" + name.substr(0, 32) + "' (lr, fm, deepfm or wide_deep)");
}

const char* ctr_kind_name(CtrKind kind) {
  switch (kind) {
    case CtrKind::logistic:
      return "lr";
    case CtrKind::fm:
      return "fm";
    case CtrKind::deepfm:
      return "deepfm";
    case CtrKind::wide_deep:
      return "wide_deep";
  }
  return "?";
}

void unique_ids(const std::vector<int64_t>& ids, std::vector<int64_t>& unique,
                std::vector<int32_t>& index) {
  unique = ids;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  index.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    index[i] = static_cast<int32_t>(std::lower_bound(unique.begin(), unique.end(), ids[i]) -
                                    unique.begin());
}

CtrModel::CtrModel(CtrModelConfig config)
    : config_(std::move(config)), bias_(Shape{1}), dbias_(Shape{1}) {
  TROUPE_ASSERT(config_.fields >= 1 && config_.dense >= 0 && config_.dim >= 1,
                "CtrModel: fields >= 1, dense >= 0, dim >= 1");
  if (config_.dense > 0) {
    dense_w_ = initialize(Shape{config_.dense, 1},
                          Initializer{Initializer::Kind::glorot_uniform, 0.0f, config_.seed});
    ddense_w_.resize(dense_w_.shape());
  }
  if (config_.has_dnn()) {
    std::vector<int64_t> widths{config_.fields * config_.dim + config_.dense};
    widths.insert(widths.end(), config_.hidden.begin(), config_.hidden.end());
    widths.push_back(1);
    dnn_ = make_mlp(widths, config_.seed + 1);
    dnn_->layer(0).set_input_grad(true);  // the embeddings below it are trained
  }
}

std::vector<Parameter> CtrModel::parameters() {
  std::vector<Parameter> p{{"bias", &bias_, &dbias_}};
  if (config_.dense > 0) p.push_back({"dense_w", &dense_w_, &ddense_w_});
  if (dnn_)
    for (auto& q : dnn_->parameters())
      p.push_back({"dnn/" + q.name, q.value, q.grad});
  return p;
}

Status CtrModel::check_batch(const Batch& b) const {
  const int64_t n = b.size();
  if (static_cast<int64_t>(b.row_splits.size()) != n + 1 || b.values.size() != b.ids.size())
    return make_error(Errc::invalid_argument, "CTR batch: malformed sparse features");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t have =
        b.row_splits[static_cast<size_t>(i + 1)] - b.row_splits[static_cast<size_t>(i)];
    if (have != config_.fields)
      return make_error(Errc::invalid_argument, "CTR batch: example " + std::to_string(i) +
                                                    " has " + std::to_string(have) +
                                                    " ids, the model takes one per field (" +
                                                    std::to_string(config_.fields) + ")");
  }
  const int64_t d = b.features.shape().rank() == 2 ? b.features.shape()[1] : 0;
  if (d != config_.dense && !(n == 0))
    return make_error(Errc::invalid_argument, "CTR batch: " + std::to_string(d) +
                                                  " dense features, the model takes " +
                                                  std::to_string(config_.dense));
  return {};
}

Expected<ConstTensorView> CtrModel::forward(const Batch& b, ConstTensorView rows,
                                            const std::vector<int32_t>& index) {
  if (auto st = check_batch(b); !st) return st.error();
  const int64_t n = b.size(), F = config_.fields, k = config_.dim, D = config_.dense;
  const int64_t W = config_.row_width();
  if (rows.shape().rank() != 2 || rows.shape()[1] != W ||
      index.size() != static_cast<size_t>(n * F))
    return make_error(Errc::invalid_argument, "CtrModel: rows " + rows.shape().to_string() +
                                                  " or index do not fit the batch");
  for (int32_t r : index)
    if (r < 0 || r >= rows.shape()[0])
      return make_error(Errc::invalid_argument, "CtrModel: index outside the rows");
  batch_ = &b;
  rows_ = rows;
  index_ = &index;
  logits_.resize(Shape{n, 1});
  const bool emb = W > 1;
  const int64_t stride = F * k + D;
  if (emb) {
    dnn_in_.resize(Shape{n, stride});
    sum_.resize(Shape{n, k});
  }
  // Examples in parallel (intra-op threads): each writes only its own row.
  parallel_for(n, kExampleGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float logit = bias_[0];
      float* e = emb ? dnn_in_.data() + i * stride : nullptr;
      float* s = emb ? sum_.data() + i * k : nullptr;
      if (emb) std::fill(s, s + k, 0.0f);
      float squares = 0.0f;
      for (int64_t f = 0; f < F; ++f) {
        const size_t at = static_cast<size_t>(i * F + f);
        const float x = b.values[at];
        const float* row = rows.data() + static_cast<int64_t>(index[at]) * W;
        logit += row[0] * x;
        if (!emb) continue;
        float* ef = e + f * k;
        for (int64_t j = 0; j < k; ++j) {
          ef[j] = row[1 + j] * x;
          s[j] += ef[j];
          squares += ef[j] * ef[j];
        }
      }
      if (D > 0) {
        const float* d = b.features.data() + i * D;
        for (int64_t j = 0; j < D; ++j)
          logit += d[j] * dense_w_[j];
        if (emb) std::copy(d, d + D, e + F * k);
      }
      if (config_.has_fm()) {
        float sq_sum = 0.0f;
        for (int64_t j = 0; j < k; ++j)
          sq_sum += s[j] * s[j];
        logit += 0.5f * (sq_sum - squares);
      }
      logits_[i] = logit;
    }
  });
  if (dnn_) {
    ConstTensorView out = dnn_->forward(dnn_in_);
    for (int64_t i = 0; i < n; ++i)
      logits_[i] += out[i];
  }
  return ConstTensorView(logits_);
}

void CtrModel::backward(ConstTensorView dlogits) {
  TROUPE_ASSERT(batch_ != nullptr && dlogits.size() == logits_.size(),
                "CtrModel backward: dlogits do not match the last forward");
  const Batch& b = *batch_;
  const int64_t n = b.size(), F = config_.fields, k = config_.dim, D = config_.dense;
  const int64_t W = config_.row_width();
  const int64_t stride = F * k + D;
  ConstTensorView dx;
  if (dnn_) dx = dnn_->backward(dlogits.reshaped(Shape{n, 1}));
  dbias_[0] = 0.0f;
  if (D > 0) ddense_w_.fill(0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float g = dlogits[i];
    dbias_[0] += g;
    for (int64_t j = 0; j < D; ++j)
      ddense_w_[j] += g * b.features.data()[i * D + j];
  }
  // d(loss)/d(e_if) for every example and field, in parallel; then summed into the rows
  // (rows are shared between examples, so that part stays on one thread).
  if (W > 1) {
    demb_.resize(Shape{n, F * k});
    parallel_for(n, kExampleGrain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float g = dlogits[i];
        const float* s = sum_.data() + i * k;
        for (int64_t f = 0; f < F; ++f) {
          const float* ef = dnn_in_.data() + i * stride + f * k;
          const float* dxf = dnn_ ? dx.data() + i * stride + f * k : nullptr;
          float* de = demb_.data() + (i * F + f) * k;
          for (int64_t j = 0; j < k; ++j) {
            float d = 0.0f;
            if (config_.has_fm()) d += g * (s[j] - ef[j]);
            if (dxf != nullptr) d += dxf[j];
            de[j] = d;
          }
        }
      }
    });
  }
  row_grads_.resize(Shape{rows_.shape()[0], W});
  row_grads_.fill(0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float g = dlogits[i];
    for (int64_t f = 0; f < F; ++f) {
      const size_t at = static_cast<size_t>(i * F + f);
      const float x = b.values[at];
      float* grow = row_grads_.data() + static_cast<int64_t>((*index_)[at]) * W;
      grow[0] += g * x;
      if (W == 1) continue;
      const float* de = demb_.data() + (i * F + f) * k;
      for (int64_t j = 0; j < k; ++j)
        grow[1 + j] += de[j] * x;
    }
  }
}

}  // namespace troupe::core
