#include "troupe/predictor.hpp"

#include <cmath>
#include <unordered_map>

#include "core/half.hpp"
#include "core/keras/ctr_graph.hpp"

namespace troupe {

struct Predictor::Impl {
  core::CtrExportConfig config;
  // The model's Keras form as a graph; keyed: predict() checks the ids against the rows
  // itself (and gives an unknown key of a dynamic table the default row).
  core::keras::CtrGraph model;
  std::vector<float> rows;                     // float32 rows, or
  std::vector<uint16_t> rows16;                // bfloat16 rows
  int64_t count = 0;                           // rows held
  std::unordered_map<int64_t, int64_t> index;  // a dynamic table: key -> row
  core::Tensor gathered;

  explicit Impl(const core::CtrExportConfig& c)
      : config(c), model(c.model, /*rows=*/1, /*keyed=*/true) {}
};

Predictor::Predictor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Predictor::Predictor(Predictor&&) noexcept = default;
Predictor& Predictor::operator=(Predictor&&) noexcept = default;
Predictor::~Predictor() = default;

core::Expected<Predictor> Predictor::load(const std::string& path) {
  auto model = core::read_ctr_export(path);
  if (!model) return model.error();
  return from(std::move(*model));
}

core::Expected<Predictor> Predictor::from(core::CtrExport m) {
  auto impl = std::make_unique<Impl>(m.config);
  for (auto& p : impl->model.parameters()) {
    auto it = m.dense.find(p.name);
    if (it == m.dense.end() || !(it->second.shape() == p.value->shape()))
      return core::make_error(core::Errc::invalid_argument,
                              "export: dense parameter '" + p.name + "' missing or misshapen");
    *p.value = std::move(it->second);
  }
  const int64_t width = m.config.model.row_width();
  if (m.rows.shape().rank() != 2 || m.rows.shape()[1] != width)
    return core::make_error(core::Errc::invalid_argument, "export: table rows of another width");
  impl->count = m.rows.shape()[0];
  const auto n = static_cast<size_t>(m.rows.size());
  if (m.config.bf16) {
    impl->rows16.resize(n);
    for (size_t i = 0; i < n; ++i)
      impl->rows16[i] = core::float_to_bf16(m.rows.data()[i]);
  } else {
    impl->rows.assign(m.rows.data(), m.rows.data() + n);
  }
  if (m.config.dynamic) {
    impl->index.reserve(m.keys.size());
    for (size_t i = 0; i < m.keys.size(); ++i)
      impl->index.emplace(m.keys[i], static_cast<int64_t>(i));
  }
  return Predictor(std::move(impl));
}

core::Expected<std::vector<float>> Predictor::predict(const core::Batch& batch) {
  Impl& m = *impl_;
  if (auto st = m.model.feed(batch); !st) return st.error();
  const std::vector<int64_t>& unique = m.model.ids();
  const int64_t width = m.config.model.row_width();
  const auto u = static_cast<int64_t>(unique.size());
  if (m.gathered.shape().rank() != 2 || m.gathered.shape()[0] != u)
    m.gathered = core::Tensor(core::Shape{u, width});
  for (int64_t r = 0; r < u; ++r) {
    const int64_t id = unique[static_cast<size_t>(r)];
    int64_t row = -1;
    if (m.config.dynamic) {
      auto it = m.index.find(id);
      if (it != m.index.end()) row = it->second;
    } else {
      if (id < 0 || id >= m.count)
        return core::make_error(core::Errc::invalid_argument,
                                "id " + std::to_string(id) + " outside the table's " +
                                    std::to_string(m.count) + " rows");
      row = id;
    }
    float* out = m.gathered.data() + r * width;
    if (row < 0) {
      std::fill(out, out + width, 0.0f);  // no row: the default row, as in training
    } else if (m.config.bf16) {
      const uint16_t* in = m.rows16.data() + row * width;
      for (int64_t c = 0; c < width; ++c)
        out[c] = core::bf16_to_float(in[c]);
    } else {
      std::copy_n(m.rows.data() + row * width, width, out);
    }
  }
  if (auto st = m.model.give_rows(m.gathered); !st) return st.error();
  auto logits = m.model.forward(/*training=*/false);
  if (!logits) return logits.error();
  std::vector<float> p(static_cast<size_t>(batch.size()));
  for (int64_t i = 0; i < batch.size(); ++i)
    p[static_cast<size_t>(i)] = static_cast<float>(1 / (1 + std::exp(-double{(*logits)[i]})));
  return p;
}

const core::CtrExportConfig& Predictor::config() const {
  return impl_->config;
}

core::CriteoOptions Predictor::criteo_options() const {
  core::CriteoOptions o;
  o.raw_keys = impl_->config.dynamic;
  o.bucket_tfrecord_keys = !impl_->config.dynamic;
  if (impl_->config.buckets_per_field > 0) o.buckets_per_field = impl_->config.buckets_per_field;
  return o;
}

int64_t Predictor::rows() const {
  return impl_->count;
}

int64_t Predictor::table_bytes() const {
  return static_cast<int64_t>(impl_->rows.size() * 4 + impl_->rows16.size() * 2 +
                              impl_->index.size() * 24);
}

}  // namespace troupe
