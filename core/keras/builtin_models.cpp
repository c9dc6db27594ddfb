#include "core/keras/builtin_models.hpp"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "core/keras/model_file.hpp"

namespace troupe::core::keras {

namespace {

using json = nlohmann::json;

json keras_object(const std::string& module, const std::string& class_name, json config) {
  return {{"module", module},
          {"class_name", class_name},
          {"config", std::move(config)},
          {"registered_name", nullptr}};
}

json initializer(const std::string& class_name, json config = json::object()) {
  return keras_object("keras.initializers", class_name, std::move(config));
}

json table_init(uint64_t seed) {
  return initializer("RandomUniform", {{"minval", -0.05}, {"maxval", 0.05}, {"seed", seed}});
}

json glorot(uint64_t seed) {
  return initializer("GlorotUniform", {{"seed", seed}});
}

// A Functional model's layers as config.json lists them: each call's inputs by the
// producing layer's name, the shapes of what each layer gives (batch dimension left out).
// Each layer is called once.
class Functional {
 public:
  void input(const std::string& name, std::vector<int64_t> dims, const std::string& dtype) {
    json shape = json::array({nullptr});
    for (int64_t d : dims)
      shape.push_back(d);
    add(name, {},
        {{"module", "keras.layers"},
         {"class_name", "InputLayer"},
         {"config", {{"batch_shape", shape}, {"dtype", dtype}, {"sparse", false}, {"name", name}}},
         {"registered_name", nullptr},
         {"name", name},
         {"inbound_nodes", json::array()}},
        shape, dtype);
    inputs_.push_back(json::array({name, 0, 0}));
  }

  /// A layer called on `from` (a merge layer takes them as one list), giving `dims`.
  void call(const std::string& class_name, const std::string& name, json config,
            const std::vector<std::string>& from, std::vector<int64_t> dims,
            const char* registered = nullptr, const std::string& module = "keras.layers") {
    config["name"] = name;
    config["trainable"] = true;
    config["dtype"] = "float32";
    json args = json::array();
    for (const auto& f : from) {
      const Layer& l = layers_.at(at_.at(f));
      args.push_back(
          {{"class_name", "__keras_tensor__"},
           {"config", {{"shape", l.shape}, {"dtype", l.dtype}, {"keras_history", {f, 0, 0}}}}});
    }
    // A merge layer's call takes its inputs as one list (Keras's Merge.call(inputs)).
    static const std::set<std::string> merges = {"Add",     "Subtract", "Multiply",    "Average",
                                                 "Maximum", "Minimum",  "Concatenate", "Dot"};
    const bool merge = merges.count(class_name) != 0;
    json shape = json::array({nullptr});
    for (int64_t d : dims)
      shape.push_back(d);
    add(name, from,
        {{"module", module},
         {"class_name", class_name},
         {"config", std::move(config)},
         {"registered_name", registered == nullptr ? json(nullptr) : json(registered)},
         {"name", name},
         {"inbound_nodes",
          {{{"args", merge ? json::array({args}) : args}, {"kwargs", json::object()}}}}},
        shape, "float32");
  }

  /// Keras's indexing `from[:, ..., start:stop]` of the last axis (the batch's and the
  /// others' whole), an operation node (keras.ops' GetItem, as Keras records `x[...]` on a
  /// symbolic tensor), giving `dims`; stop < 0: to the end.
  void slice_last(const std::string& name, const std::string& from, int64_t start, int64_t stop,
                  std::vector<int64_t> dims) {
    const Layer& l = layers_.at(at_.at(from));
    auto slice = [](json start_, json stop_) {
      return json{{"class_name", "__slice__"},
                  {"config",
                   {{"start", std::move(start_)}, {"stop", std::move(stop_)}, {"step", nullptr}}}};
    };
    json key = json::array();
    for (size_t d = 1; d < l.shape.size(); ++d)  // the batch's axis, then the others but the last
      key.push_back(slice(nullptr, nullptr));
    key.push_back(slice(start, stop < 0 ? json(nullptr) : json(stop)));
    json x = {
        {"class_name", "__keras_tensor__"},
        {"config", {{"shape", l.shape}, {"dtype", l.dtype}, {"keras_history", {from, 0, 0}}}}};
    json shape = json::array({nullptr});
    for (int64_t d : dims)
      shape.push_back(d);
    add(name, {from},
        {{"module", "keras.src.ops.numpy"},
         {"class_name", "GetItem"},
         {"config", {{"name", name}}},
         {"registered_name", "GetItem"},
         {"name", name},
         {"inbound_nodes", {{{"args", {x, key}}, {"kwargs", json::object()}}}}},
        shape, l.dtype);
  }

  /// The model's config, its layers in the order Keras's Functional keeps them (deepest
  /// first, ties in the order a depth-first walk from the output meets them): the order
  /// Keras numbers the saved variables' groups in ("layers/dense", "layers/dense_1", ...),
  /// which a reader of the file follows.
  json model(const std::string& name, const std::string& output) const {
    std::vector<size_t> walked;                  // layers, inputs before their users
    std::vector<int> first(layers_.size(), -1);  // order of first meeting
    std::vector<bool> done(layers_.size(), false);
    int met = 0;
    walk(at_.at(output), walked, first, done, met);
    std::vector<int> depth(layers_.size(), 0);
    for (auto it = walked.rbegin(); it != walked.rend(); ++it)
      for (const auto& parent : layers_[*it].from) {
        const size_t p = at_.at(parent);
        depth[p] = std::max(depth[p], depth[*it] + 1);
      }
    std::vector<size_t> order = walked;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return depth[a] != depth[b] ? depth[a] > depth[b] : first[a] < first[b];
    });
    json layers = json::array();
    for (size_t i : order)
      layers.push_back(layers_[i].config);
    return {{"module", "keras.src.models.functional"},
            {"class_name", "Functional"},
            {"registered_name", "Functional"},
            {"config",
             {{"name", name},
              {"trainable", true},
              {"layers", std::move(layers)},
              {"input_layers", inputs_},
              {"output_layers", json::array({output, 0, 0})}}}};
  }

 private:
  struct Layer {
    std::vector<std::string> from;
    json config, shape;
    std::string dtype;
  };

  void add(const std::string& name, std::vector<std::string> from, json config, json shape,
           std::string dtype) {
    at_[name] = layers_.size();
    layers_.push_back({std::move(from), std::move(config), std::move(shape), std::move(dtype)});
  }

  void walk(size_t i, std::vector<size_t>& walked, std::vector<int>& first, std::vector<bool>& done,
            int& met) const {
    if (done[i]) return;
    if (first[i] < 0) first[i] = met++;
    for (const auto& parent : layers_[i].from)
      walk(at_.at(parent), walked, first, done, met);
    done[i] = true;
    walked.push_back(i);
  }

  std::vector<Layer> layers_;
  std::map<std::string, size_t> at_;
  json inputs_ = json::array();
};

json dense(int64_t units, const char* activation, uint64_t seed) {
  return {{"units", units},
          {"activation", activation},
          {"use_bias", true},
          {"kernel_initializer", glorot(seed)},
          {"bias_initializer", initializer("Zeros")}};
}

// Keras's serialized optimizer of one of core::make_optimizer's names (Troupe's named
// optimizers take Keras's defaults, so the rate and the momentum are all there is to say);
// "" or another name: RMSprop at 0.001, what Keras's compile() takes by default.
json keras_optimizer(const std::string& name, float lr) {
  static const std::map<std::string, std::pair<const char*, const char*>> classes = {
      {"sgd", {"SGD", "SGD"}},
      {"momentum", {"SGD", "SGD"}},
      {"nesterov", {"SGD", "SGD"}},
      {"adam", {"Adam", "adam"}},
      {"adamw", {"AdamW", "adamw"}},
      {"adagrad", {"Adagrad", "adagrad"}},
      {"rmsprop", {"RMSprop", "rmsprop"}},
      {"ftrl", {"Ftrl", "ftrl"}}};
  auto c = classes.find(name);
  if (c == classes.end())
    return keras_object("keras.optimizers", "RMSprop",
                        {{"name", "rmsprop"}, {"learning_rate", 0.001}});
  json config = {{"name", c->second.second}, {"learning_rate", lr}};
  if (name == "momentum" || name == "nesterov")
    config.update({{"momentum", 0.9}, {"nesterov", name == "nesterov"}});
  return keras_object("keras.optimizers", c->second.first, std::move(config));
}

}  // namespace

json ctr_model_config(const CtrModelConfig& c, int64_t rows, const std::string& optimizer,
                      float learning_rate, bool weighted) {
  const int64_t F = c.fields, D = c.dense, k = c.dim;
  const uint64_t seed = c.seed;
  Functional f;
  f.input("ids", {F}, "int64");
  if (weighted) f.input("values", {F}, "float32");
  if (D > 0) f.input("dense", {D}, "float32");
  std::vector<std::string> terms;
  // One table: each id's row holds its linear weight (column 0) and its factors (1..dim).
  const int64_t W = c.row_width();
  f.call("Embedding", "embedding",
         {{"input_dim", rows},
          {"output_dim", W},
          {"embeddings_initializer", table_init(seed)},
          {"mask_zero", false}},
         {"ids"}, {F, W});
  std::string table = "embedding";
  if (weighted) {  // each id's row times its value
    f.call("Reshape", "values_col", {{"target_shape", {F, 1}}}, {"values"}, {F, 1});
    f.call("Multiply", "embedding_weighted", json::object(), {"embedding", "values_col"}, {F, W});
    table = "embedding_weighted";
  }
  std::string linear = table, factors;
  if (c.kind != CtrKind::logistic) {
    f.slice_last("linear", table, 0, 1, {F, 1});
    f.slice_last("factors", table, 1, -1, {F, k});
    linear = "linear";
    factors = "factors";
  }
  f.call("GlobalAveragePooling1D", "linear_mean",
         {{"data_format", "channels_last"}, {"keepdims", false}}, {linear}, {1});
  f.call("Rescaling", "first_order", {{"scale", static_cast<double>(F)}, {"offset", 0.0}},
         {"linear_mean"}, {1});
  terms.push_back("first_order");
  if (D > 0) {
    f.call("Dense", "dense_linear", dense(1, "linear", seed), {"dense"}, {1});
    terms.push_back("dense_linear");
  }
  if (c.has_fm()) {
    f.call("FactorizationMachine", "fm", json::object(), {factors}, {1},
           "troupe>FactorizationMachine", "troupe");
    terms.push_back("fm");
  }
  if (c.has_dnn()) {
    f.call("Flatten", "embedding_flat", {{"data_format", "channels_last"}}, {factors}, {F * k});
    std::string x = "embedding_flat";
    int64_t width = F * k;
    if (D > 0) {
      width += D;
      f.call("Concatenate", "dnn_in", {{"axis", -1}}, {x, "dense"}, {width});
      x = "dnn_in";
    }
    for (size_t i = 0; i < c.hidden.size(); ++i) {
      const std::string name = "dnn_" + std::to_string(i);
      f.call("Dense", name, dense(c.hidden[i], "relu", seed + 2 + i), {x}, {c.hidden[i]});
      x = name;
    }
    f.call("Dense", "dnn_out", dense(1, "linear", seed + 2 + c.hidden.size()), {x}, {1});
    terms.push_back("dnn_out");
  }
  std::string output = terms.front();
  if (terms.size() > 1) {
    f.call("Add", "logit", json::object(), terms, {1});
    output = "logit";
  }
  json model = f.model(ctr_kind_name(c.kind), output);
  model["compile_config"] = {
      {"optimizer", keras_optimizer(optimizer, learning_rate)},
      {"loss", keras_object("keras.losses", "BinaryCrossentropy",
                            {{"name", "binary_crossentropy"}, {"from_logits", true}})},
      {"loss_weights", nullptr},
      {"metrics",
       {keras_object("keras.metrics", "AUC", {{"name", "auc"}, {"from_logits", true}}),
        keras_object("keras.metrics", "BinaryAccuracy",
                     {{"name", "accuracy"}, {"threshold", 0.0}})}},
      {"weighted_metrics", nullptr},
      {"steps_per_execution", 1}};
  return model;
}

std::string ctr_graph_path(const CtrModelConfig& c, const std::string& parameter) {
  if (parameter == "dense_w") return c.dense > 0 ? "dense_linear/kernel" : "";
  if (parameter == "bias") return c.dense > 0 ? "dense_linear/bias" : "";
  const std::string dnn = "dnn/dense_";
  if (!c.has_dnn() || parameter.rfind(dnn, 0) != 0) return "";
  const size_t slash = parameter.find('/', dnn.size());
  if (slash == std::string::npos || slash == dnn.size() || slash - dnn.size() > 4) return "";
  const std::string index = parameter.substr(dnn.size(), slash - dnn.size());
  const std::string weight = parameter.substr(slash + 1);
  if (index.find_first_not_of("0123456789") != std::string::npos ||
      (weight != "kernel" && weight != "bias"))
    return "";
  const size_t i = std::stoul(index);
  if (std::to_string(i) != index || i > c.hidden.size()) return "";
  return (i < c.hidden.size() ? "dnn_" + index : std::string("dnn_out")) + "/" + weight;
}

Expected<std::map<std::string, Tensor>> ctr_model_values(const CtrModelConfig& c,
                                                         const std::map<std::string, Tensor>& dense,
                                                         const Tensor& rows, bool weighted) {
  if (weighted && c.dense == 0 && !c.has_dnn())
    return make_error(Errc::invalid_argument,
                      std::string("the weighted Keras form of a ") + ctr_kind_name(c.kind) +
                          " model without dense features has no weight to hold its bias");
  const int64_t F = c.fields, W = c.row_width();
  if (rows.shape().rank() != 2 || rows.shape()[1] != W)
    return make_error(Errc::invalid_argument, "the table has shape " + rows.shape().to_string() +
                                                  ", not [rows, " + std::to_string(W) + "]");
  std::map<std::string, Tensor> out;
  float unplaced = 0.0f;  // the bias of a model without dense features
  for (const auto& [name, shape] : ctr_dense_variables(c)) {
    auto it = dense.find(name);
    if (it == dense.end())
      return make_error(Errc::invalid_argument, "the model has no parameter '" + name + "'");
    if (!(it->second.shape() == shape))
      return make_error(Errc::invalid_argument, "parameter '" + name + "' has shape " +
                                                    it->second.shape().to_string() + ", not " +
                                                    shape.to_string());
    const std::string path = ctr_graph_path(c, name);
    if (path.empty())
      unplaced = it->second.to(Device::cpu())[0];
    else
      out[path] = it->second.to(Device::cpu());
  }
  if (c.has_dnn()) {  // a deep model's bias joins the MLP's last one
    out.at("dnn_out/bias")[0] += unplaced;
    unplaced = 0.0f;
  }
  // The table as it is, with what is left of the bias (LR and FM without dense features)
  // spread over the fields' linear weights: column 0 of each row.
  Tensor table = rows.to(Device::cpu());
  if (unplaced != 0.0f) {
    const float share = unplaced / static_cast<float>(F);
    for (int64_t r = 0, R = table.shape()[0]; r < R; ++r)
      table[r * W] += share;
  }
  out["embedding/embeddings"] = std::move(table);
  return out;
}

std::map<std::string, std::string> ctr_former_names(const CtrModelConfig& c) {
  std::map<std::string, std::string> out{{"embedding/embeddings", "embedding"}};
  for (const auto& [name, shape] : ctr_dense_variables(c))
    if (auto path = ctr_graph_path(c, name); !path.empty()) out[path] = name;
  return out;
}

Expected<std::map<std::string, Tensor>> ctr_program_values(
    const CtrModelConfig& c, const std::map<std::string, Tensor>& weights) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, shape] : ctr_dense_variables(c)) {
    const std::string path = ctr_graph_path(c, name);
    if (path.empty()) {  // the bias of a model without dense features: held elsewhere
      out[name] = Tensor(shape, 0.0f);
      continue;
    }
    auto it = weights.find(path);
    if (it == weights.end())
      return make_error(Errc::invalid_argument, "the model has no weight '" + path + "'");
    if (it->second.shape() != shape)
      return make_error(Errc::invalid_argument, "weight '" + path + "' has shape " +
                                                    it->second.shape().to_string() + ", not " +
                                                    shape.to_string());
    out[name] = it->second.to(Device::cpu());
  }
  return out;
}

Status ctr_columns(const CtrModelConfig& c, const Batch& b, bool weighted, bool labels,
                   Batch& out) {
  const int64_t n = b.size(), F = c.fields, D = c.dense;
  if (static_cast<int64_t>(b.row_splits.size()) != n + 1 ||
      (!b.values.empty() && b.values.size() != b.ids.size()))
    return make_error(Errc::invalid_argument, "CTR batch: malformed sparse features");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t have =
        b.row_splits[static_cast<size_t>(i + 1)] - b.row_splits[static_cast<size_t>(i)];
    if (have != F)
      return make_error(Errc::invalid_argument,
                        "CTR batch: example " + std::to_string(i) + " has " + std::to_string(have) +
                            " ids, the model takes one per field (" + std::to_string(F) + ")");
  }
  if (!weighted)
    for (size_t i = 0; i < b.values.size(); ++i)
      if (b.values[i] != 1.0f)
        return make_error(Errc::invalid_argument,
                          "CTR batch: id " + std::to_string(b.ids[i]) + " has the value " +
                              std::to_string(b.values[i]) +
                              "; this form of the model counts every id once (value 1)");
  const int64_t d = b.features.shape().rank() == 2 ? b.features.shape()[1] : 0;
  if (n > 0 && d != D)
    return make_error(Errc::invalid_argument, "CTR batch: " + std::to_string(d) +
                                                  " dense features, the model takes " +
                                                  std::to_string(D));
  out.columns.resize(1 + (weighted ? 1 : 0) + (D > 0 ? 1 : 0) + (labels ? 1 : 0));
  size_t at = 0;
  auto column = [&](const char* name, ColumnKind kind, int64_t width) -> Column& {
    Column& col = out.columns[at++];
    col.name = name;
    col.kind = kind;
    col.shape = Shape{n, width};
    return col;
  };
  column("ids", ColumnKind::ints, F).ints.assign(b.ids.begin(), b.ids.end());
  if (weighted)
    column("values", ColumnKind::floats, F).floats.assign(b.values.begin(), b.values.end());
  if (D > 0)
    column("dense", ColumnKind::floats, D)
        .floats.assign(b.features.data(), b.features.data() + n * D);
  if (labels)
    column("label", ColumnKind::floats, 1).floats.assign(b.labels.begin(), b.labels.end());
  return {};
}

Expected<CtrModelConfig> ctr_form_config(const graph::Graph& g) {
  auto not_the_form = [](const std::string& why) {
    return make_error(Errc::invalid_argument,
                      "the model is not the built-in CTR model's Keras form: " + why);
  };
  std::map<std::string, Shape> weights;
  for (const auto& ref : g.weights())
    weights[ref.path] = ref.weight().shape;
  CtrModelConfig c;
  c.dense = 0;
  c.hidden.clear();
  bool ids = false;
  for (const auto& in : g.inputs()) {
    if (in.name == "ids" && in.spec.shape.size() == 1) {
      c.fields = in.spec.shape[0];
      ids = true;
    } else if (in.name == "dense" && in.spec.shape.size() == 1) {
      c.dense = in.spec.shape[0];
    } else {
      return not_the_form("input '" + in.name + "'");
    }
  }
  if (!ids) return not_the_form("no input 'ids'");
  auto table = weights.find("embedding/embeddings");
  if (table == weights.end() || table->second.rank() != 2)
    return not_the_form("no table 'embedding/embeddings'");
  c.dim = table->second[1] - 1;
  for (size_t i = 0; weights.count("dnn_" + std::to_string(i) + "/kernel"); ++i)
    c.hidden.push_back(weights.at("dnn_" + std::to_string(i) + "/kernel")[1]);
  const bool fm = g.operation("fm") != nullptr, dnn = weights.count("dnn_out/kernel") != 0;
  c.kind =
      fm ? (dnn ? CtrKind::deepfm : CtrKind::fm) : (dnn ? CtrKind::wide_deep : CtrKind::logistic);
  if (c.kind == CtrKind::logistic) c.dim = 16;  // unused: LR's rows are one wide
  if (c.row_width() != table->second[1])
    return not_the_form("a table of rows " + std::to_string(table->second[1]) + " wide");
  return c;
}

bool is_ctr_program_checkpoint(const Checkpoint& ckpt) {
  auto table = ckpt.tensors.find("embedding");
  return table != ckpt.tensors.end() && table->second.shape().rank() == 2 &&
         ckpt.tensors.count("bias") == 1 && ckpt.tensors.count("embedding/embeddings") == 0;
}

Expected<Checkpoint> migrate_ctr_checkpoint(const CtrModelConfig& c, const Checkpoint& old) {
  auto table = old.tensors.find("embedding");
  if (table == old.tensors.end())
    return make_error(Errc::invalid_argument, "the checkpoint has no table 'embedding'");
  std::map<std::string, Tensor> dense;
  for (const auto& [name, shape] : ctr_dense_variables(c)) {
    auto it = old.tensors.find(name);
    if (it != old.tensors.end()) dense.emplace(name, it->second);
  }
  auto values = ctr_model_values(c, dense, table->second);
  if (!values) return values.error();
  Checkpoint out;
  out.tensors = std::move(*values);
  for (const auto& [name, ints] : old.ints)
    out.ints[name == "embedding/keys" ? "embedding/embeddings/keys" : name] = ints;
  return out;
}

Expected<json> classifier_model_config(const ClassifierForm& form, const std::string& optimizer,
                                       float learning_rate) {
  if (!form.cnn && form.widths.size() < 2)
    return make_error(Errc::invalid_argument, "an MLP needs at least two widths (in and out)");
  if (!form.cnn && !form.features && form.widths.front() != 28 * 28)
    return make_error(Errc::invalid_argument,
                      "a built-in MLP has a Keras form over 28x28 images only (its first width "
                      "784); features of another width need ClassifierForm::features");
  Functional f;
  std::string x;
  if (form.features) {  // as the programs read them: [784] (an MLP's first width), scaled
    f.input("features", {form.cnn ? 28 * 28 : form.widths.front()}, "float32");
    x = "features";
  } else {
    f.input("image", {28, 28}, "float32");
    f.call("Rescaling", "rescaling", {{"scale", 1.0 / 255.0}, {"offset", 0.0}}, {"image"},
           {28, 28});
    x = "rescaling";
  }
  uint64_t seed = form.seed;
  std::vector<int64_t> widths = form.widths;
  if (form.cnn) {
    f.call("Reshape", "reshape", {{"target_shape", {28, 28, 1}}}, {x}, {28, 28, 1});
    f.call("Conv2D", "conv2d",
           {{"filters", 32},
            {"kernel_size", {3, 3}},
            {"strides", {1, 1}},
            {"padding", "valid"},
            {"data_format", "channels_last"},
            {"dilation_rate", {1, 1}},
            {"groups", 1},
            {"activation", "relu"},
            {"use_bias", true},
            {"kernel_initializer", glorot(seed++)},
            {"bias_initializer", initializer("Zeros")}},
           {"reshape"}, {26, 26, 32});
    x = "conv2d";
    widths = {26 * 26 * 32, 128, 10};
  }
  if (!form.features || form.cnn) {
    f.call("Flatten", "flatten", {{"data_format", "channels_last"}}, {x}, {widths.front()});
    x = "flatten";
  }
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const std::string name = "dense_" + std::to_string(i);
    f.call("Dense", name, dense(widths[i + 1], i + 2 < widths.size() ? "relu" : "linear", seed + i),
           {x}, {widths[i + 1]});
    x = name;
  }
  json model = f.model(form.cnn ? "cnn" : "mlp", x);
  model["compile_config"] = {
      {"optimizer", keras_optimizer(optimizer, learning_rate)},
      {"loss", keras_object("keras.losses", "SparseCategoricalCrossentropy",
                            {{"name", "sparse_categorical_crossentropy"}, {"from_logits", true}})},
      {"loss_weights", nullptr},
      {"metrics", {"accuracy"}},
      {"weighted_metrics", nullptr},
      {"steps_per_execution", 1}};
  return model;
}

namespace {

// Writes the model `description` holds with `values` (by graph weight path) as a .keras
// file; errors name the file (a missing value or one of another shape: keras_datasets').
Status write_form(const std::string& path, const json& description,
                  const std::map<std::string, Tensor>& values) {
  auto loaded = load_model_bytes(description.dump(), path);
  if (!loaded) return loaded.error();
  auto st = save_model(path, *loaded, values);
  if (st || st.error().message.rfind(path, 0) == 0) return st;
  return make_error(st.error().code, path + ": " + st.error().message);
}

}  // namespace

Status write_classifier_keras(const std::string& path, const ClassifierForm& form,
                              const std::map<std::string, Tensor>& weights,
                              const std::string& optimizer, float learning_rate) {
  auto description = classifier_model_config(form, optimizer, learning_rate);
  if (!description)
    return make_error(description.error().code, path + ": " + description.error().message);
  return write_form(path, *description, weights);
}

Status write_ctr_keras(const std::string& path, const CtrExport& model) {
  const auto& config = model.config;
  if (config.dynamic)
    return make_error(Errc::invalid_argument,
                      path +
                          ": a model of a dynamic table (rows by raw 64-bit key) has no Keras "
                          "form; export it as a .tmodel for troupe predict");
  if (config.bf16)
    return make_error(Errc::invalid_argument,
                      path + ": a Keras file holds the table in float32; export it without --bf16");
  const int64_t rows = model.rows.shape().rank() == 2 ? model.rows.shape()[0] : 0;
  auto values = ctr_model_values(config.model, model.dense, model.rows);
  if (!values) return make_error(values.error().code, path + ": " + values.error().message);
  return write_form(
      path, ctr_model_config(config.model, rows, config.optimizer, config.learning_rate), *values);
}

}  // namespace troupe::core::keras
