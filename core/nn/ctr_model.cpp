#include "core/nn/ctr_model.hpp"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "core/partitioner.hpp"

namespace troupe::core {

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

namespace {

// Sorts (key, position) pairs by key, stably: least significant 11-bit digit first, only as
// many digits as the keys' range needs (two for ids below 4M, six for hashed 64-bit ids).
void radix_sort(std::vector<uint64_t>& keys, std::vector<uint32_t>& pos, uint64_t range) {
  constexpr int digit = 11;
  constexpr size_t buckets = size_t{1} << digit;
  thread_local std::vector<uint64_t> keys2;
  thread_local std::vector<uint32_t> pos2;
  keys2.resize(keys.size());
  pos2.resize(pos.size());
  for (int shift = 0; shift < 64 && (range >> shift) != 0; shift += digit) {
    size_t count[buckets] = {};
    for (uint64_t k : keys)
      ++count[(k >> shift) & (buckets - 1)];
    size_t sum = 0;
    for (size_t& c : count)
      sum += std::exchange(c, sum);
    for (size_t i = 0; i < keys.size(); ++i) {
      const size_t at = count[(keys[i] >> shift) & (buckets - 1)]++;
      keys2[at] = keys[i];
      pos2[at] = pos[i];
    }
    keys.swap(keys2);
    pos.swap(pos2);
  }
}

}  // namespace

void unique_ids(const std::vector<int64_t>& ids, std::vector<int64_t>& unique,
                std::vector<int32_t>& index) {
  unique_ids(ids.data(), ids.size(), unique, index);
}

void unique_ids(const int64_t* ids, size_t n, std::vector<int64_t>& unique,
                std::vector<int32_t>& index) {
  unique.clear();
  index.resize(n);
  if (n == 0) return;
  // The ids relative to the smallest, as unsigned keys that sort as the ids do; each with
  // its position, so one pass over the sorted keys gives both the unique ids and the index.
  thread_local std::vector<uint64_t> keys;
  thread_local std::vector<uint32_t> pos;
  const int64_t lo = *std::min_element(ids, ids + n);
  uint64_t range = 0;
  keys.resize(n);
  pos.resize(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = static_cast<uint64_t>(ids[i]) - static_cast<uint64_t>(lo);
    pos[i] = static_cast<uint32_t>(i);
    range |= keys[i];
  }
  radix_sort(keys, pos, range);
  for (size_t j = 0; j < n; ++j) {
    if (j == 0 || keys[j] != keys[j - 1])
      unique.push_back(static_cast<int64_t>(keys[j] + static_cast<uint64_t>(lo)));
    index[pos[j]] = static_cast<int32_t>(unique.size() - 1);
  }
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

Status CtrModel::to(Device device, Precision precision) {
  auto backend = backend_for(device);
  if (!backend) return backend.error();
  for (Tensor* t : {&bias_, &dbias_, &dense_w_, &ddense_w_})
    if (t->data() != nullptr) *t = t->to(device);
  if (dnn_)
    if (auto st = dnn_->to(device, precision); !st) return st;
  device_ = device;
  backend_ = *backend;
  return {};
}

Tensor& CtrModel::place(Tensor& t, const Shape& shape) {
  if (t.device() != device_)
    t = Tensor(shape, DType::float32, device_);
  else
    t.resize(shape);
  return t;
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
  if (rows.device() != device_)
    return make_error(Errc::invalid_argument, "CtrModel: rows on " + rows.device().to_string() +
                                                  ", the model computes on " + device_.to_string());
  for (int32_t r : index)
    if (r < 0 || r >= rows.shape()[0])
      return make_error(Errc::invalid_argument, "CtrModel: index outside the rows");
  CtrArgs& a = args_;
  a.n = n;
  a.fields = F;
  a.dim = k;
  a.dense = D;
  a.width = W;
  a.fm = config_.has_fm();
  a.values = on(device_, ConstTensorView(b.values.data(), Shape{n * F}), values_);
  a.index =
      on(device_, ConstTensorView(index.data(), Shape{n * F}, Device::cpu(), DType::int32), index_);
  a.features = ConstTensorView();
  if (D > 0) a.features = on(device_, ConstTensorView(b.features.data(), Shape{n, D}), features_);
  a.rows = rows;
  a.bias = bias_;
  a.dense_w = dense_w_;
  const bool emb = W > 1;
  a.dnn_in = emb ? TensorView(place(dnn_in_, Shape{n, F * k + D})) : TensorView();
  a.sum = emb ? TensorView(place(sum_, Shape{n, k})) : TensorView();
  a.logits = place(logits_, Shape{n, 1});
  backend_->ctr_forward(a);
  if (dnn_) backend_->add(dnn_->forward(dnn_in_), logits_);
  forwarded_ = true;
  return ConstTensorView(logits_);
}

void CtrModel::backward(ConstTensorView dlogits) {
  TROUPE_ASSERT(forwarded_ && dlogits.size() == logits_.size(),
                "CtrModel backward: dlogits do not match the last forward");
  const CtrArgs& a = args_;
  CtrGradArgs g;
  g.dlogits = dlogits;
  if (dnn_) g.ddnn_in = dnn_->backward(dlogits.reshaped(Shape{a.n, 1}));
  g.dbias = dbias_;
  g.ddense_w = ddense_w_;
  if (a.width > 1) g.demb = place(demb_, Shape{a.n, a.fields * a.dim});
  g.row_grads = place(row_grads_, Shape{a.rows.shape()[0], a.width});
  backend_->ctr_backward(a, g);
}

}  // namespace troupe::core
