#include "core/nn/ctr_export.hpp"

#include <cmath>
#include <cstring>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint.hpp"
#include "core/half.hpp"

namespace troupe::core {

namespace {

nlohmann::json config_json(const CtrExportConfig& c) {
  nlohmann::json j{{"model", ctr_kind_name(c.model.kind)},
                   {"fields", c.model.fields},
                   {"dense", c.model.dense},
                   {"dim", c.model.dim},
                   {"hidden", c.model.hidden},
                   {"table", c.dynamic ? "dynamic" : "fixed"},
                   {"buckets_per_field", c.buckets_per_field},
                   {"rows_dtype", c.bf16 ? "bfloat16" : "float32"}};
  if (!c.optimizer.empty())
    j.update({{"optimizer", c.optimizer}, {"learning_rate", c.learning_rate}});
  return j;
}

}  // namespace

std::string ctr_export_config_text(const CtrExportConfig& config) {
  return config_json(config).dump();
}

Expected<CtrExportConfig> parse_ctr_export_config(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [](const std::string& what) {
    return make_error(Errc::data_loss, "export/config: " + what);
  };
  if (!j.is_object()) return bad("not a JSON object");
  CtrExportConfig c;
  auto integer = [&](const char* key, int64_t lo, int64_t hi, int64_t& out) -> Status {
    if (!j.contains(key) || !j[key].is_number_integer()) return bad(std::string("no ") + key);
    out = j[key].get<int64_t>();
    if (out < lo || out > hi)
      return bad(std::string(key) + " " + std::to_string(out) + " outside [" + std::to_string(lo) +
                 ", " + std::to_string(hi) + "]");
    return {};
  };
  if (!j.contains("model") || !j["model"].is_string()) return bad("no model");
  auto kind = parse_ctr_kind(j["model"].get<std::string>());
  if (!kind) return bad(kind.error().message);
  c.model.kind = *kind;
  for (auto st : {integer("fields", 1, 4096, c.model.fields),
                  integer("dense", 0, 4096, c.model.dense), integer("dim", 1, 1024, c.model.dim),
                  integer("buckets_per_field", 0, int64_t{1} << 40, c.buckets_per_field)})
    if (!st) return st.error();
  if (!j.contains("hidden") || !j["hidden"].is_array() || j["hidden"].size() > 64)
    return bad("no hidden widths");
  c.model.hidden.clear();
  for (const auto& h : j["hidden"]) {
    if (!h.is_number_integer() || h.get<int64_t>() < 1 || h.get<int64_t>() > 65536)
      return bad("a hidden width outside [1, 65536]");
    c.model.hidden.push_back(h.get<int64_t>());
  }
  if (!j.contains("table") || !j["table"].is_string() ||
      (j["table"] != "fixed" && j["table"] != "dynamic"))
    return bad("table is neither fixed nor dynamic");
  c.dynamic = j["table"] == "dynamic";
  if (!j.contains("rows_dtype") || !j["rows_dtype"].is_string() ||
      (j["rows_dtype"] != "float32" && j["rows_dtype"] != "bfloat16"))
    return bad("rows_dtype is neither float32 nor bfloat16");
  c.bf16 = j["rows_dtype"] == "bfloat16";
  if (!c.dynamic && c.buckets_per_field < 1) return bad("a fixed table without buckets");
  if (j.contains("optimizer")) {  // optional: written since the Keras form needs it
    if (!j["optimizer"].is_string() || j["optimizer"].get<std::string>().size() > 32 ||
        !j.contains("learning_rate") || !j["learning_rate"].is_number() ||
        !(j["learning_rate"].get<double>() >= 0.0 && j["learning_rate"].get<double>() < 1e6))
      return bad("a bad optimizer or learning_rate");
    c.optimizer = j["optimizer"].get<std::string>();
    c.learning_rate = j["learning_rate"].get<float>();
  }
  return c;
}

namespace {

// The dense parameters' values a config's model has.
int64_t dense_values(const CtrModelConfig& c) {
  int64_t n = 0;
  for (const auto& [name, shape] : ctr_dense_variables(c))
    n += shape.num_elements();
  return n;
}

// Everything read_ctr_export checks, on an export in memory.
Status check(const CtrExport& m) {
  const auto& c = m.config;
  // Before a model of the config's shape is built: its parameters must be the values the
  // file holds, so no config makes the reader allocate more than the file brings.
  int64_t held = 0;
  for (const auto& [name, t] : m.dense)
    held += t.size();
  if (held != dense_values(c.model))
    return make_error(Errc::data_loss, "dense parameters hold " + std::to_string(held) +
                                           " values where the config's model has " +
                                           std::to_string(dense_values(c.model)));
  const auto variables = ctr_dense_variables(c.model);
  for (const auto& [name, shape] : variables) {
    auto it = m.dense.find(name);
    if (it == m.dense.end()) return make_error(Errc::data_loss, "dense/" + name + ": missing");
    if (!(it->second.shape() == shape))
      return make_error(Errc::data_loss, "dense/" + name + ": shape " +
                                             it->second.shape().to_string() +
                                             " where the model has " + shape.to_string());
    for (int64_t i = 0; i < it->second.size(); ++i)
      if (!std::isfinite(it->second.data()[i]))
        return make_error(Errc::data_loss, "dense/" + name + ": a value that is not finite");
  }
  if (m.dense.size() != variables.size())
    return make_error(Errc::data_loss, "dense parameters the model does not have");
  const int64_t width = c.model.row_width();
  if (m.rows.shape().rank() != 2 || m.rows.shape()[1] != width)
    return make_error(Errc::data_loss, "table/rows: shape " + m.rows.shape().to_string() +
                                           ", not [rows, " + std::to_string(width) + "]");
  const int64_t n = m.rows.shape()[0];
  if (c.dynamic) {
    if (static_cast<int64_t>(m.keys.size()) != n)
      return make_error(Errc::data_loss, "table/keys: " + std::to_string(m.keys.size()) +
                                             " keys for " + std::to_string(n) + " rows");
    std::unordered_set<int64_t> seen(m.keys.begin(), m.keys.end());
    if (static_cast<int64_t>(seen.size()) != n)
      return make_error(Errc::data_loss, "table/keys: a key twice");
  } else if (n != c.model.fields * c.buckets_per_field || !m.keys.empty()) {
    return make_error(Errc::data_loss, "table/rows: " + std::to_string(n) +
                                           " rows where a fixed table of " +
                                           std::to_string(c.model.fields) + " x " +
                                           std::to_string(c.buckets_per_field) + " has " +
                                           std::to_string(c.model.fields * c.buckets_per_field));
  }
  for (int64_t i = 0; i < m.rows.size(); ++i)
    if (!std::isfinite(m.rows.data()[i]))
      return make_error(Errc::data_loss, "table/rows: a value that is not finite in row " +
                                             std::to_string(i / width));
  return {};
}

}  // namespace

Status write_ctr_export(const std::string& path, const CtrExport& m) {
  if (auto st = check(m); !st)
    return make_error(Errc::invalid_argument, path + ": " + st.error().message);
  Checkpoint c;
  c.ints["export/config"] = text_ints(ctr_export_config_text(m.config));
  for (const auto& [name, t] : m.dense)
    c.tensors.emplace("dense/" + name, t);
  if (m.config.dynamic) c.ints["table/keys"] = m.keys;
  if (m.config.bf16) {
    const auto n = static_cast<size_t>(m.rows.size());
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i)
      h[i] = float_to_bf16(m.rows.data()[i]);
    h.resize((n + 3) / 4 * 4, 0);
    std::vector<int64_t> packed(h.size() / 4);
    std::memcpy(packed.data(), h.data(), h.size() * 2);
    c.ints["table/rows_bf16"] = std::move(packed);
    c.ints["table/shape"] = {m.rows.shape()[0], m.rows.shape()[1]};
  } else {
    c.tensors.emplace("table/rows", m.rows);
  }
  return write_checkpoint(path, c);
}

Expected<CtrExport> read_ctr_export(const std::string& path) {
  auto c = read_checkpoint(path);
  if (!c) return c.error();
  auto fail = [&](const Error& e) { return make_error(Errc::data_loss, path + ": " + e.message); };
  auto text = c->ints.find("export/config");
  if (text == c->ints.end())
    return fail(make_error(Errc::data_loss, "not a model export (no export/config)"));
  auto config_text = ints_text(text->second);
  if (!config_text) return fail(make_error(Errc::data_loss, "export/config: not text"));
  auto config = parse_ctr_export_config(*config_text);
  if (!config) return fail(config.error());
  CtrExport m;
  m.config = *config;
  const std::string prefix = "dense/";
  for (auto& [name, t] : c->tensors)
    if (name.compare(0, prefix.size(), prefix) == 0)
      m.dense.emplace(name.substr(prefix.size()), std::move(t));
  if (m.config.dynamic) {
    auto keys = c->ints.find("table/keys");
    if (keys == c->ints.end()) return fail(make_error(Errc::data_loss, "table/keys: missing"));
    m.keys = std::move(keys->second);
  }
  if (m.config.bf16) {
    auto packed = c->ints.find("table/rows_bf16");
    auto shape = c->ints.find("table/shape");
    if (packed == c->ints.end() || shape == c->ints.end() || shape->second.size() != 2 ||
        shape->second[0] < 0 || shape->second[1] != m.config.model.row_width() ||
        shape->second[0] > (int64_t{1} << 40) / std::max<int64_t>(1, shape->second[1]))
      return fail(make_error(Errc::data_loss, "table/rows_bf16 or table/shape: missing or bad"));
    const int64_t n = shape->second[0] * shape->second[1];
    if (static_cast<int64_t>(packed->second.size()) != (n + 3) / 4)
      return fail(
          make_error(Errc::data_loss, "table/rows_bf16: " + std::to_string(packed->second.size()) +
                                          " ints for " + std::to_string(n) + " values"));
    m.rows = Tensor(Shape{shape->second[0], shape->second[1]});
    const auto* h = reinterpret_cast<const uint16_t*>(packed->second.data());
    for (int64_t i = 0; i < n; ++i)
      m.rows.data()[i] = bf16_to_float(h[i]);
  } else {
    auto rows = c->tensors.find("table/rows");
    if (rows == c->tensors.end()) return fail(make_error(Errc::data_loss, "table/rows: missing"));
    m.rows = std::move(rows->second);
  }
  if (auto st = check(m); !st) return fail(st.error());
  return m;
}

}  // namespace troupe::core
