#pragma once

// The DeepFM step the step benchmarks time (bench_train_step on the CPU, bench_gpu on a
// GPU), as ctr_ps's workers compute it: the model's Keras form as a layer graph, a batch
// fed (ids deduplicated), the rows of its unique ids given, forward, loss, backward, and the
// gradients on the host in the variables' layout. 26 fields of 100,000 ids each, 13 dense
// features, dim 16, 400-400-400 (CtrModelConfig's defaults).
//
//   troupe::bench::DeepfmStep s(4096, device, precision);
//   s.run();                       // one step
//   json p = s.profile(5);         // where the time of 5 steps went, by part and layer

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.hpp"
#include "core/keras/ctr_graph.hpp"
#include "core/nn/losses.hpp"
#include "core/partitioner.hpp"

namespace troupe::bench {

class DeepfmStep {
 public:
  DeepfmStep(int batch, core::Device device, core::Precision precision)
      : model_(config_, config_.fields * kIds, /*keyed=*/false) {
    TROUPE_ASSERT(model_.to(device, precision).ok(), "the bench's device");
    std::vector<core::Example> ex(static_cast<size_t>(batch));
    uint64_t state = 11;
    auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
    for (auto& e : ex) {
      for (int f = 0; f < config_.fields; ++f)
        e.ids.push_back(f * kIds + static_cast<int64_t>((next() >> 33) % kIds));
      for (int j = 0; j < config_.dense; ++j)
        e.features.push_back(static_cast<float>(next() >> 40) / (1 << 24));
      e.label = static_cast<float>((next() >> 63) & 1);
    }
    batch_ = core::collate(ex);
    feed();
    // Rows for every id the batch can hold, on the device; a step gives the first ones.
    rows_ =
        core::initialize(core::Shape{static_cast<int64_t>(batch_.ids.size()), config_.row_width()},
                         {core::Initializer::Kind::random_uniform, 0.05f, 3})
            .to(device);
  }

  const core::CtrModelConfig& config() const { return config_; }
  core::keras::CtrGraph& model() { return model_; }

  /// The parts of a step, in order, each named.
  std::vector<std::pair<const char*, std::function<void()>>> parts() {
    return {{"feed", [this] { feed(); }},
            {"give_rows",
             [this] {
               const auto u = static_cast<int64_t>(model_.ids().size());
               TROUPE_ASSERT(model_.give_rows(rows_.view().rows(0, u)).ok(), "the batch's rows");
             }},
            {"forward_loss_backward",
             [this] {
               auto logits = model_.forward(/*training=*/true);
               TROUPE_ASSERT(logits.ok(), "the bench's forward");
               (void)loss_.forward(*logits, batch_.labels.data());
               model_.backward(loss_.backward());
             }},
            {"dense_grads", [this] { (void)model_.dense_grads(); }},
            {"row_grads", [this] { (void)model_.row_grads(); }}};
  }

  void run() {
    for (auto& [name, fn] : parts())
      fn();
  }

  /// Where the time of `steps` steps went, microseconds per step: each part, and each layer
  /// call of the graph, with the device synchronized after each (so slower than run()).
  nlohmann::json profile(int steps) {
    using clock = std::chrono::steady_clock;
    core::Backend& be = *core::backend_for(model_.layer_graph().device()).value();
    auto ps = parts();
    std::vector<double> spent(ps.size(), 0.0);
    model_.layer_graph().set_profiling(true);
    for (int i = 0; i < steps; ++i)
      for (size_t k = 0; k < ps.size(); ++k) {
        const auto t0 = clock::now();
        ps[k].second();
        (void)be.synchronize();
        spent[k] += std::chrono::duration<double>(clock::now() - t0).count();
      }
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& c : model_.layer_graph().take_profile())
      layers.push_back({{"layer", c.layer},
                        {"class", c.class_name},
                        {"forward_us", c.forward_s / steps * 1e6},
                        {"backward_us", c.backward_s / steps * 1e6}});
    model_.layer_graph().set_profiling(false);
    nlohmann::json out{{"layers", layers}};
    for (size_t k = 0; k < ps.size(); ++k)
      out[std::string(ps[k].first) + "_us"] = spent[k] / steps * 1e6;
    return out;
  }

 private:
  static constexpr int64_t kIds = 100000;  // per field
  void feed() { TROUPE_ASSERT(model_.feed(batch_).ok(), "the bench's batch fits the model"); }

  core::CtrModelConfig config_;
  core::keras::CtrGraph model_;
  core::Batch batch_;
  core::Tensor rows_;
  core::SigmoidBinaryCrossEntropy loss_;
};

}  // namespace troupe::bench
