#include "troupe/model.hpp"

#include <cmath>
#include <mutex>

#include "api/impl.hpp"
#include "api/model_state.hpp"
#include "core/metrics.hpp"
#include "core/partitioner.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/registry.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

using core::Errc;
using core::make_error;

namespace detail {

std::vector<core::Initializer> initializers(const ModelSpec& spec,
                                            const std::vector<core::Parameter>& params) {
  std::vector<core::Initializer> out;
  uint64_t seed = spec.seed;
  for (const auto& p : params) {
    const bool kernel = p.value->shape().rank() >= 2;
    out.push_back(
        {kernel ? core::Initializer::Kind::glorot_uniform : core::Initializer::Kind::zeros, 0.0f,
         seed++});
  }
  return out;
}

core::Expected<BatchStats> run_batch(Replica& r, const core::Batch& batch, bool backward) {
  if (batch.size() == 0) return BatchStats{};
  if (auto st = r.layers->check_input(batch.features.shape()); !st) return st.error();
  const core::ConstTensorView logits = r.layers->forward(batch.features);
  auto loss = r.loss.forward(logits, batch.classes.data());
  if (!loss) return loss.error();
  if (!std::isfinite(*loss))
    return make_error(Errc::invalid_argument, "loss is not finite (" + std::to_string(*loss) + ")");
  core::Accuracy accuracy;
  accuracy.update(logits, batch.classes.data());
  if (backward) r.layers->backward(r.loss.backward());
  const auto n = batch.size();
  return BatchStats{static_cast<double>(*loss) * static_cast<double>(n), accuracy.correct(), n, 1};
}

Replica::Replica(const ModelSpec& s) : layers(s.build()), params(layers->parameters()) {
  for (const auto& p : params)
    names.push_back(p.name);
  const auto inits = initializers(s, params);
  for (size_t i = 0; i < params.size(); ++i)
    *params[i].value = core::initialize(params[i].value->shape(), inits[i]);
}

core::Status Replica::assign(std::vector<core::Tensor> values) {
  if (values.size() != params.size())
    return make_error(Errc::internal, "expected " + std::to_string(params.size()) +
                                          " values, got " + std::to_string(values.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    if (values[i].shape() != params[i].value->shape())
      return make_error(Errc::invalid_argument,
                        "variable '" + names[i] + "' has shape " + values[i].shape().to_string() +
                            ", the model expects " + params[i].value->shape().to_string());
    *params[i].value = std::move(values[i]);
  }
  return {};
}

core::Expected<std::shared_ptr<const std::vector<core::Example>>> EvalData::get(
    const ModelSpec& spec) {
  std::lock_guard<std::mutex> lock(mu);
  if (examples) return examples;
  if (!spec.eval_examples)
    return make_error(
        Errc::invalid_argument,
        "model '" + spec.name + "' has no evaluation examples (ModelSpec::eval_examples)");
  auto loaded = spec.eval_examples();
  if (!loaded) return loaded.error();
  examples = std::make_shared<const std::vector<core::Example>>(std::move(*loaded));
  return examples;
}

}  // namespace detail

core::Expected<core::Batch> eval_batch(const std::vector<core::Example>& examples, int64_t size,
                                       int64_t index) {
  const auto n = static_cast<int64_t>(examples.size());
  if (size <= 0 || index < 0 || index * size >= n)
    return make_error(Errc::out_of_range, "evaluation batch " + std::to_string(index) + " of " +
                                              std::to_string(n) + " examples in batches of " +
                                              std::to_string(size) + " does not exist");
  const auto first = examples.begin() + index * size;
  const auto last = examples.begin() + std::min(n, (index + 1) * size);
  return core::collate(std::vector<core::Example>(first, last));
}

void register_model(Registry& registry, const ModelSpec& spec) {
  // One replica per process, shared by the two steps; a worker runs its steps one at a time.
  struct Shared {
    detail::Replica replica;
    detail::EvalData eval;
    explicit Shared(const ModelSpec& s) : replica(s) {}
  };
  auto shared = std::make_shared<Shared>(spec);
  registry.add_step(spec.name + "/train",
                    [shared](StepContext& ctx, PerWorkerDataset ds) -> core::Expected<BatchStats> {
                      auto& r = shared->replica;
                      auto batch = ctx.next_batch(ds);
                      if (!batch) return batch.error();
                      if (!*batch)
                        return make_error(Errc::out_of_range,
                                          "per-worker dataset '" + ds.name + "' ended");
                      auto values = ctx.pull(r.names);
                      if (!values) return values.error();
                      if (auto st = r.assign(std::move(*values)); !st) return st.error();
                      auto stats = detail::run_batch(r, **batch, /*backward=*/true);
                      if (!stats) return stats;
                      std::vector<std::pair<std::string, core::ConstTensorView>> grads;
                      for (auto& p : r.params)
                        grads.emplace_back(p.name, *p.grad);
                      if (auto st = ctx.push(grads); !st) return st.error();
                      return stats;
                    });
  registry.add_step(spec.name + "/evaluate",
                    [shared, spec](StepContext& ctx, int64_t index) -> core::Expected<BatchStats> {
                      auto& r = shared->replica;
                      auto examples = shared->eval.get(spec);
                      if (!examples) return examples.error();
                      auto batch = eval_batch(**examples, spec.eval_batch_size, index);
                      if (!batch) return batch.error();
                      auto values = ctx.pull(r.names);
                      if (!values) return values.error();
                      if (auto st = r.assign(std::move(*values)); !st) return st.error();
                      return detail::run_batch(r, *batch, /*backward=*/false);
                    });
}

Model::Model(ModelSpec spec) : s_(std::make_unique<State>(std::move(spec))) {}
Model::~Model() {
  if (s_->strategy != nullptr) s_->strategy->impl().before_destroy.erase(this);
}

Model::State::State(ModelSpec s) : spec(std::move(s)), replica(spec) {
  auto opt = core::make_optimizer(spec.optimizer, spec.learning_rate);
  if (opt) {
    optimizer = std::move(*opt);
    for (const auto& p : replica.params)
      slots.push_back(optimizer->make_slots(p.value->shape()));
  } else {
    optimizer_error = opt.error();
  }
}

const ModelSpec& Model::spec() const {
  return s_->spec;
}
core::Sequential& Model::layers() {
  return *s_->replica.layers;
}
std::vector<core::Parameter>& Model::parameters() {
  return s_->replica.params;
}
ParameterServerStrategy* Model::strategy() {
  return s_->strategy;
}
ClusterCoordinator* Model::coordinator_if_made() {
  return s_->coordinator.get();
}

core::Status Model::attach(ParameterServerStrategy& strategy) {
  if (s_->strategy == &strategy) return {};
  if (s_->strategy != nullptr)
    return make_error(Errc::invalid_argument,
                      "model '" + s_->spec.name + "' is attached to another strategy");
  if (!s_->optimizer) return s_->optimizer_error;
  auto& params = s_->replica.params;
  const auto inits = detail::initializers(s_->spec, params);
  std::vector<Variable> vars;
  for (size_t i = 0; i < params.size(); ++i) {
    auto v = strategy.create_variable(params[i].name, params[i].value->shape(), inits[i],
                                      s_->spec.optimizer, s_->spec.learning_rate);
    if (!v) return v.error();
    vars.push_back(*v);
  }
  s_->strategy = &strategy;
  s_->variables = std::move(vars);
  // Destroyed first, the strategy detaches this model (and ends its coordinator).
  strategy.impl().before_destroy[this] = [s = s_.get()] {
    s->coordinator.reset();
    s->strategy = nullptr;
    s->variables.clear();
  };
  return {};
}

core::Expected<ClusterCoordinator*> Model::coordinator(const CoordinatorOptions& options) {
  if (s_->coordinator) return s_->coordinator.get();
  if (s_->strategy == nullptr)
    return make_error(Errc::invalid_argument,
                      "model '" + s_->spec.name + "' is not attached to a ParameterServerStrategy");
  auto c = ClusterCoordinator::make(*s_->strategy, options);
  if (!c) return c.error();
  s_->coordinator = std::move(*c);
  return s_->coordinator.get();
}

core::Status Model::pull() {
  if (s_->strategy == nullptr) return {};
  std::vector<core::Tensor> values;
  for (const auto& v : s_->variables) {
    auto t = s_->strategy->read(v);
    if (!t) return t.error();
    values.push_back(std::move(*t));
  }
  return s_->replica.assign(std::move(values));
}

core::Checkpoint Model::weights() {
  core::Checkpoint c;
  for (const auto& p : s_->replica.params)
    c.tensors[p.name] = *p.value;
  return c;
}

core::Status Model::set_weights(const core::Checkpoint& ckpt) {
  std::vector<core::Tensor> values;
  for (const auto& name : s_->replica.names) {
    auto it = ckpt.tensors.find(name);
    if (it == ckpt.tensors.end())
      return make_error(Errc::invalid_argument, "the checkpoint has no variable '" + name + "'");
    values.push_back(it->second);
  }
  return s_->replica.assign(std::move(values));
}

core::Expected<std::shared_ptr<const std::vector<core::Example>>> Model::eval_examples() {
  return s_->eval.get(s_->spec);
}

int64_t Model::eval_batches() {
  auto ex = eval_examples();
  if (!ex || s_->spec.eval_batch_size <= 0) return 0;
  const auto n = static_cast<int64_t>((*ex)->size());
  return (n + s_->spec.eval_batch_size - 1) / s_->spec.eval_batch_size;
}

core::Expected<BatchStats> Model::evaluate() {
  auto ex = eval_examples();
  if (!ex) return ex.error();
  if (auto st = pull(); !st) return st.error();
  BatchStats total;
  for (int64_t i = 0, n = eval_batches(); i < n; ++i) {
    auto batch = eval_batch(**ex, s_->spec.eval_batch_size, i);
    if (!batch) return batch.error();
    auto stats = detail::run_batch(s_->replica, *batch, /*backward=*/false);
    if (!stats) return stats;
    total.merge(*stats);
  }
  return total;
}

core::Expected<BatchStats> Model::evaluate_distributed() {
  auto coord = coordinator();
  if (!coord) return coord.error();
  auto ex = eval_examples();  // the chief counts the batches; workers load their own copy
  if (!ex) return ex.error();
  // One closure per batch. A closure whose worker is lost runs again elsewhere and
  // computes the same batch; each RemoteValue resolves once, so each batch counts once.
  std::vector<RemoteValue<BatchStats>> results;
  for (int64_t i = 0, n = eval_batches(); i < n; ++i)
    results.push_back((*coord)->schedule<BatchStats>(s_->spec.name + "/evaluate", i));
  BatchStats total;
  core::Status failed;
  for (auto& r : results) {
    auto stats = r.fetch();
    if (!stats) {
      if (failed.ok()) failed = stats.error();
      continue;
    }
    total.merge(*stats);
  }
  const auto joined = (*coord)->join();
  if (!failed.ok()) return failed.error();
  if (!joined.ok()) return joined.error();
  return total;
}

}  // namespace troupe
