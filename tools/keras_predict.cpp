// `troupe predict --model M.keras`: a Keras model file (trained by troupe train, or by Keras)
// scores data files in this process: its compiled metrics where the data holds the labels,
// examples/s, batch-1 latency, and, with --predictions, every output's values.

#include <algorithm>
#include <chrono>
#include <fstream>

#include "api/graph_replica.hpp"
#include "core/data/guard.hpp"
#include "core/data/named_input.hpp"
#include "tools/data_files.hpp"
#include "tools/model_tools.hpp"

namespace troupe::tools {

namespace {

using clock_type = std::chrono::steady_clock;

nlohmann::json predict_failed(const core::Error& e, int& code) {
  code = 1;
  return {{"ok", false}, {"program", "troupe predict"}, {"error", e.to_string()}};
}

}  // namespace

bool is_keras_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4] = {};
  in.read(head, 4);
  if (in.gcount() == 4 && head[0] == 'P' && head[1] == 'K') return true;  // a zip: .keras
  return path.size() > 5 && (path.compare(path.size() - 6, 6, ".keras") == 0 ||
                             path.compare(path.size() - 5, 5, ".json") == 0);
}

nlohmann::json run_keras_predict(const PredictOptions& o, int& code) {
  auto source = read_keras_source(o.model);
  if (!source) return predict_failed(source.error(), code);
  auto replica = detail::GraphReplica::make(**source, KerasOptions{});
  if (!replica) return predict_failed(replica.error(), code);
  auto& r = **replica;
  for (auto& ref : r.graph().weights())  // a JSON model holds no tables: zeros to score with
    if (ref.weight().value.shape() != ref.weight().shape)
      return predict_failed(core::make_error(core::Errc::invalid_argument,
                                             o.model + ": has no weights for '" + ref.path +
                                                 "' (a model description without weights)"),
                            code);
  // --data: a file, "a,b" (IDX's images and labels), or a directory.
  std::vector<std::string> given;
  for (size_t at = 0; at <= o.data.size();) {
    const size_t comma = std::min(o.data.find(',', at), o.data.size());
    given.push_back(o.data.substr(at, comma - at));
    at = comma + 1;
  }
  auto format = data_format_of(o.format, given);
  if (!format) return predict_failed(format.error(), code);
  auto files = o.data == "-" ? core::Expected<std::vector<std::string>>(given)
                             : expand_data_files(given, core::data_format_name(*format), true);
  if (!files) return predict_failed(files.error(), code);
  // The labels are read where the data has them all: then the metrics are computed.
  auto specs = detail::feature_specs(r);
  const size_t inputs = r.graph().inputs().size();
  bool with_labels = true;
  if (*format != core::DataFormat::idx && o.data != "-") {
    auto names = core::feature_names(files->front(), *format);
    if (!names) return predict_failed(names.error(), code);
    for (size_t i = inputs; i < specs.size(); ++i)
      with_labels =
          with_labels && std::find(names->begin(), names->end(), specs[i].name) != names->end();
  }
  if (!with_labels) specs.resize(inputs);
  core::NamedInputOptions in;
  in.format = *format;
  in.features = specs;
  in.batch = static_cast<size_t>(o.batch);
  in.drop_remainder = false;
  in.epochs = 1;
  const detail::GraphReplica::RowsFn rows = detail::held_tables(r);
  const auto& outputs = r.graph().outputs();
  std::vector<std::vector<float>> values(outputs.size());
  BatchStats total;
  int64_t examples = 0;
  double predict_s = 0;
  std::vector<double> latency_us;
  // One batch forward: with its labels, the metrics too (thrown errors name the data).
  auto score = [&](const core::Batch& b) {
    if (with_labels) {
      total.merge(r.run(b, /*train=*/false, rows).value());
      return;
    }
    if (auto st = r.forward(b, /*train=*/false, rows); !st)
      throw core::BadExpectedAccess(st.error());
  };
  auto status = core::guard_user_data("data", [&] {
    if (o.latency_samples > 0) {  // batch 1 from the start of the data, read separately
      auto one = in;
      one.batch = 1;
      one.prefetch = 0;
      auto it = core::named_input(*files, core::InputContext{}, one).make_iterator();
      for (int64_t i = 0; i < o.latency_samples; ++i) {
        auto b = it->next();
        if (!b) break;
        const auto t = clock_type::now();
        score(*b);
        latency_us.push_back(
            std::chrono::duration<double, std::micro>(clock_type::now() - t).count());
      }
      total = BatchStats{};
    }
    auto it = core::named_input(*files, core::InputContext{}, in).make_iterator();
    while (auto b = it->next()) {
      const auto t = clock_type::now();
      score(*b);
      predict_s += std::chrono::duration<double>(clock_type::now() - t).count();
      if (!o.predictions.empty())
        for (size_t i = 0; i < outputs.size(); ++i) {
          const core::Tensor y =
              core::Tensor::from_view(r.graph().output(i)).to(core::Device::cpu());
          values[i].insert(values[i].end(), y.data(), y.data() + y.size());
        }
      examples += b->size();
    }
  });
  if (!status) return predict_failed(status.error(), code);
  nlohmann::json out{
      {"ok", true},           {"program", "troupe predict"},
      {"model", o.model},     {"data", o.data},
      {"examples", examples}, {"examples_per_sec", predict_s > 0 ? examples / predict_s : 0.0}};
  if (with_labels)
    for (const auto& [k, v] : detail::graph_logs(r, total))
      out[k] = v;
  if (!o.predictions.empty()) {
    nlohmann::json p = nlohmann::json::object();
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::vector<int64_t> shape{examples};
      shape.insert(shape.end(), outputs[i].spec.shape.begin(), outputs[i].spec.shape.end());
      p[outputs[i].name] = {{"shape", shape}, {"values", values[i]}};
    }
    std::ofstream f(o.predictions);
    f << p.dump() << "\n";
    if (!f)
      return predict_failed(core::make_error(core::Errc::io_error, "cannot write " + o.predictions),
                            code);
    out["predictions"] = o.predictions;
  }
  if (!latency_us.empty()) {
    std::sort(latency_us.begin(), latency_us.end());
    out["latency_p50_us"] = latency_us[latency_us.size() / 2];
    out["latency_p99_us"] = latency_us[(latency_us.size() - 1) * 99 / 100];
  }
  code = 0;
  return out;
}

}  // namespace troupe::tools
