// The built-in CTR models in Keras's form (core/keras/builtin_models.hpp) compute what the
// models' formulas say (ctr_reference.hpp, plain host loops): for every kind, with and
// without dense features, the graph built from the generated config and given the
// reference's values gives the same logits, the same dense gradients and the same
// table-row gradients.

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include "core/keras/builtin_models.hpp"
#include "core/keras/classifier_graph.hpp"
#include "core/keras/ctr_graph.hpp"
#include "core/keras/keras_model.hpp"
#include "core/nn/ctr_model.hpp"
#include "ctr_batch.hpp"
#include "ctr_reference.hpp"
#include "helpers.hpp"

using namespace troupe::core;

namespace {

void check_close(ConstTensorView got, ConstTensorView want, const std::string& what) {
  INFO(what << ": " << got.shape().to_string() << " vs " << want.shape().to_string());
  REQUIRE(got.size() == want.size());
  double worst = 0.0;
  int64_t at = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i]));
    if (err > worst) worst = err, at = i;
  }
  INFO(what << "[" << at << "] " << got[at] << " vs " << want[at]);
  CHECK(worst <= 1e-5);
}

// The reference's step on `b`: the batch's unique ids, the rows of them it is given (from
// `table`), its logits; then its backward pass of `dlogits`.
struct WiredStep {
  std::vector<int64_t> unique;
  Tensor held, logits;
};
WiredStep wired_step(troupe::test::CtrReference& m, const Batch& b, const Tensor& table,
                     const Tensor& dlogits) {
  WiredStep s;
  std::vector<int32_t> index;
  unique_ids(b.ids, s.unique, index);
  const int64_t W = table.shape()[1];
  s.held = Tensor(Shape{static_cast<int64_t>(s.unique.size()), W});
  for (size_t u = 0; u < s.unique.size(); ++u)
    for (int64_t j = 0; j < W; ++j)
      s.held[static_cast<int64_t>(u) * W + j] = table[s.unique[u] * W + j];
  s.logits = Tensor::from_view(m.forward(b, s.held, index));
  m.backward(dlogits);
  return s;
}

}  // namespace

TEST_CASE(
    "The Keras form of each built-in CTR model computes the reference's logits and "
    "gradients",
    "[ctr][keras]") {
  // (dense features, the weighted form): without dense features the bias is folded (the
  // export's form); the weighted form (ctr_ps's) takes each id's value as the model does.
  for (auto [dense, weighted] :
       {std::pair<int64_t, bool>{2, false}, {0, false}, {2, true}, {0, true}}) {
    for (CtrKind kind : {CtrKind::logistic, CtrKind::fm, CtrKind::deepfm, CtrKind::wide_deep}) {
      INFO(ctr_kind_name(kind) << " with " << dense << " dense features"
                               << (weighted ? ", weighted" : ""));
      CtrModelConfig cfg;
      cfg.kind = kind;
      cfg.fields = 4;
      cfg.dense = dense;
      cfg.dim = 3;
      cfg.hidden = {6, 5};
      cfg.seed = 3;
      const int64_t rows = cfg.fields * 3;  // make_ctr_batch: 3 ids per field
      const int64_t W = cfg.row_width();

      // The reference, every value random (the bias too: it must land somewhere).
      troupe::test::CtrReference m(cfg);
      std::map<std::string, Tensor> values;
      uint64_t seed = 40;
      for (auto& p : m.parameters()) {
        *p.value = troupe::test::random_tensor(p.value->shape(), ++seed, -0.5f, 0.5f);
        values[p.name] = *p.value;
      }
      const Tensor table = troupe::test::random_tensor(Shape{rows, W}, 7, -0.5f, 0.5f);
      Batch b = troupe::test::make_ctr_batch(5, cfg.fields, cfg.dense, 11);
      if (!weighted)
        std::fill(b.values.begin(), b.values.end(), 1.0f);  // the export's ids count once
      const Tensor dlogits = troupe::test::random_tensor(Shape{5, 1}, 9);
      const WiredStep wired = wired_step(m, b, table, dlogits);
      const std::vector<int64_t>& unique = wired.unique;
      const Tensor& want = wired.logits;

      // The Keras form, from its config, with the reference's values.
      auto model =
          keras::build_keras_model(keras::ctr_model_config(cfg, rows, "adagrad", 0.1f, weighted));
      INFO((model ? std::string() : model.error().message));
      REQUIRE(model.ok());
      auto& g = *model->graph;
      auto keras_values = keras::ctr_model_values(cfg, values, table, weighted);
      if (weighted && dense == 0 && !cfg.has_dnn()) {
        // LR's and FM's bias would go into the linear rows, which the values scale.
        REQUIRE_FALSE(keras_values.ok());
        CHECK(keras_values.error().message.find("bias") != std::string::npos);
        continue;
      }
      REQUIRE(keras_values.ok());
      REQUIRE(keras_values->size() == g.weights().size());
      for (const auto& ref : g.weights()) {
        INFO(ref.path);
        auto v = keras_values->find(ref.path);
        REQUIRE(v != keras_values->end());
        REQUIRE(v->second.shape() == ref.weight().shape);
        ref.weight().value = v->second;
      }
      Batch columns_batch;
      Column ids{"ids", ColumnKind::ints, Shape{5, cfg.fields}, {}, b.ids, {}};
      columns_batch.columns.push_back(ids);
      if (weighted)
        columns_batch.columns.push_back(
            {"values", ColumnKind::floats, Shape{5, cfg.fields}, b.values, {}, {}});
      if (dense > 0)
        columns_batch.columns.push_back(
            {"dense",
             ColumnKind::floats,
             Shape{5, dense},
             std::vector<float>(b.features.data(), b.features.data() + b.features.size()),
             {},
             {}});
      REQUIRE(g.feed(columns_batch).ok());
      for (auto& t : g.tables()) {
        REQUIRE(t.ids == unique);  // the batch's unique ids, ascending, as the reference's
        const auto& w = g.weights()[t.weight].weight();
        const int64_t width = w.shape[1];
        Tensor r(Shape{static_cast<int64_t>(t.ids.size()), width});
        for (size_t u = 0; u < t.ids.size(); ++u)
          for (int64_t j = 0; j < width; ++j)
            r[static_cast<int64_t>(u) * width + j] = w.value[t.ids[u] * width + j];
        t.rows = std::move(r);
      }
      REQUIRE(g.forward(/*training=*/true).ok());
      check_close(g.output(0), want, "logits");

      g.backward({ConstTensorView(dlogits)});
      std::map<std::string, const Tensor*> grad_of;
      for (size_t w = 0; w < g.weights().size(); ++w)
        grad_of[g.weights()[w].path] = &g.gradient(w);
      for (auto& p : m.parameters()) {
        if (p.name == "bias") {
          if (dense > 0) check_close(*grad_of.at("dense_linear/bias"), *p.grad, "bias");
          continue;
        }
        const std::string path = p.name == "dense_w"              ? "dense_linear/kernel"
                                 : p.name == "dnn/dense_2/kernel" ? "dnn_out/kernel"
                                 : p.name == "dnn/dense_2/bias"
                                     ? "dnn_out/bias"
                                     : "dnn_" + p.name.substr(10);  // dnn/dense_N/...
        INFO(p.name << " -> " << path);
        REQUIRE(grad_of.count(path) == 1);
        check_close(*grad_of.at(path), *p.grad, p.name);
      }
      REQUIRE(g.tables().size() == 1);  // one table, a row per id: the programs' layout
      CHECK(g.weights()[g.tables()[0].weight].path == "embedding/embeddings");
      check_close(g.tables()[0].row_grads, m.row_grads(), "the rows' gradients");
    }
  }
}

TEST_CASE(
    "CtrGraph trains the Keras form over the programs' variables: the same logits, "
    "dense gradients by name and row gradients in the table's layout",
    "[ctr][keras]") {
  // dim 8 and 16: the factorization machine's vector path; 3: its loop. Batches with values
  // run the weighted form, batches of ones the plain one; one CtrGraph takes both in turn.
  // Without dense features the bias is CtrGraph's own, added to the graph's output.
  for (const auto& [dim, dense] : {std::pair<int64_t, int64_t>{3, 2}, {8, 2}, {16, 2}, {8, 0}}) {
    for (CtrKind kind : {CtrKind::logistic, CtrKind::fm, CtrKind::deepfm, CtrKind::wide_deep}) {
      CtrModelConfig cfg;
      cfg.kind = kind;
      cfg.fields = 4;
      cfg.dense = dense;
      cfg.dim = dim;
      cfg.hidden = {6, 5};
      cfg.seed = 3;
      const int64_t rows = cfg.fields * 3, W = cfg.row_width();
      troupe::test::CtrReference m(cfg);
      std::vector<Tensor> values;
      uint64_t seed = 60;
      for (auto& p : m.parameters()) {
        *p.value = troupe::test::random_tensor(p.value->shape(), ++seed, -0.5f, 0.5f);
        values.push_back(*p.value);
      }
      keras::CtrGraph graph(cfg, rows, /*keyed=*/false);
      REQUIRE(graph.names().size() == values.size());
      for (size_t i = 0; i < values.size(); ++i)
        CHECK(graph.shapes()[i] == values[i].shape());
      REQUIRE(graph.assign(values).ok());
      const Tensor table = troupe::test::random_tensor(Shape{rows, W}, 7, -0.5f, 0.5f);
      for (const bool weighted : {true, false, true}) {
        INFO(ctr_kind_name(kind) << ", dim " << dim << ", " << dense << " dense features"
                                 << (weighted ? ", weighted" : ""));
        Batch b = troupe::test::make_ctr_batch(5, cfg.fields, cfg.dense, weighted ? 11 : 12);
        if (!weighted) std::fill(b.values.begin(), b.values.end(), 1.0f);
        const Tensor dlogits = troupe::test::random_tensor(Shape{5, 1}, 9);
        const WiredStep wired = wired_step(m, b, table, dlogits);

        REQUIRE(graph.feed(b).ok());
        REQUIRE(graph.ids() == wired.unique);
        REQUIRE(graph.give_rows(wired.held).ok());
        auto logits = graph.forward(/*training=*/true);
        REQUIRE(logits.ok());
        check_close(*logits, wired.logits, "logits");
        graph.backward(dlogits);
        const auto grads = graph.dense_grads();
        auto params = m.parameters();
        REQUIRE(grads.size() == params.size());
        for (size_t i = 0; i < grads.size(); ++i) {
          CHECK(grads[i].first == params[i].name);
          check_close(grads[i].second, *params[i].grad, params[i].name);
        }
        check_close(graph.row_grads(), m.row_grads(), "the rows' gradients");
      }
      // A batch the model cannot take is an error naming what is wrong, not an abort.
      Batch short_batch = troupe::test::make_ctr_batch(2, cfg.fields - 1, cfg.dense, 5);
      auto refused = graph.feed(short_batch);
      REQUIRE_FALSE(refused.ok());
      CHECK(refused.error().message.find("one per field") != std::string::npos);
    }
  }
}

TEST_CASE("The Keras form of a built-in model names what is missing and refuses a dynamic table",
          "[ctr][keras]") {
  CtrModelConfig cfg;
  cfg.kind = CtrKind::deepfm;
  cfg.fields = 2;
  cfg.dense = 1;
  cfg.dim = 2;
  cfg.hidden = {3};
  std::map<std::string, Tensor> values;
  for (const auto& [name, shape] : ctr_dense_variables(cfg))
    values[name] = Tensor(shape);
  values.erase("dnn/dense_1/kernel");
  auto r = keras::ctr_model_values(cfg, values, Tensor(Shape{4, cfg.row_width()}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("dnn/dense_1/kernel") != std::string::npos);
  auto narrow = keras::ctr_model_values(cfg, {}, Tensor(Shape{4, 1}));
  REQUIRE_FALSE(narrow.ok());
  CHECK(narrow.error().message.find("[4, 1]") != std::string::npos);

  CtrExport dynamic;
  dynamic.config.model = cfg;
  dynamic.config.dynamic = true;
  troupe::test::TempDir dir;
  const std::string path = dir.file("dynamic.keras");
  auto st = keras::write_ctr_keras(path, dynamic);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("dynamic table") != std::string::npos);
  CHECK_FALSE(std::ifstream(path).good());  // nothing written
}

TEST_CASE("The Keras form of a built-in classifier refuses an MLP that is not 784 wide",
          "[keras][classifier]") {
  keras::ClassifierForm narrow;
  narrow.widths = {100, 10};
  auto refused = keras::classifier_model_config(narrow);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("784") != std::string::npos);
  narrow.features = true;  // the programs' features may be any width
  CHECK(keras::classifier_model_config(narrow).ok());
}

TEST_CASE(
    "ClassifierGraph trains the built-in classifiers as their graph: gradients allocated "
    "before the first pass, each reported final once, inputs checked",
    "[keras][classifier]") {
  for (const char* name : {"mlp", "cnn"}) {
    INFO(name);
    auto model = keras::make_classifier(name, 4);
    INFO((model ? std::string() : model.error().message));
    REQUIRE(model.ok());
    keras::ClassifierGraph& graph = **model;
    auto gp = graph.parameters();
    REQUIRE(gp.size() == (std::string(name) == "mlp" ? 4u : 6u));
    // Gradients exist before the first backward pass (a mirrored step gives their
    // addresses to its all-reduce first) and stay where they are.
    std::vector<const float*> grad_at;
    for (auto& p : gp) {
      REQUIRE(p.grad->shape() == p.value->shape());
      grad_at.push_back(p.grad->data());
    }
    const Tensor x = troupe::test::random_tensor(Shape{5, 784}, 3, 0.0f, 1.0f);
    REQUIRE(graph.check_input(x.shape()).ok());
    const Tensor logits = Tensor::from_view(graph.forward(x));
    CHECK(logits.shape() == Shape{5, 10});
    const Tensor dy = troupe::test::random_tensor(Shape{5, 10}, 8);
    std::vector<int> reports(gp.size(), 0);
    std::vector<Tensor> at_report(gp.size());
    graph.backward_parameters(dy, [&](size_t i) {
      ++reports[i];
      at_report[i] = *gp[i].grad;  // what a bucket would send now
    });
    for (size_t i = 0; i < gp.size(); ++i) {
      INFO(gp[i].name);
      CHECK(reports[i] == 1);
      CHECK(gp[i].grad->data() == grad_at[i]);
      check_close(at_report[i], *gp[i].grad, gp[i].name + " when reported");
    }
    // The last layer's bias gradient is the batch's dy summed: the graph's backward pass
    // is the one the layer tests check against Keras and finite differences.
    const Tensor& db = *gp.back().grad;
    for (int64_t c = 0; c < 10; ++c) {
      double sum = 0.0;
      for (int64_t i = 0; i < 5; ++i)
        sum += dy[i * 10 + c];
      CHECK(db[c] == Approx(sum).margin(1e-5));
    }
    auto wrong = graph.check_input(Shape{5, 783});
    REQUIRE_FALSE(wrong.ok());
    CHECK(wrong.error().message.find("784") != std::string::npos);
    auto ints = (*model)->graph().feed(Tensor(Shape{2, 784}, DType::int32, Device::cpu()));
    REQUIRE_FALSE(ints.ok());
    CHECK(ints.error().message.find("float32") != std::string::npos);
  }
  CHECK_FALSE(keras::make_classifier("resnet", 1).ok());
}
