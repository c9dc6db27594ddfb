// The generic steps every worker of a Keras job runs. The chief sends each worker the job
// (the model file's bytes and the description of its data) as the arguments of the per-worker
// dataset "keras"; building that dataset installs the model in the worker's process (and
// again on a worker that rejoins: the coordinator replays it), so the step "keras/train"
// finds it. A worker holds one installed model: a later job's replaces it.

#include <mutex>

#include "api/graph_replica.hpp"
#include "api/model_state.hpp"
#include "core/data/named_input.hpp"
#include "troupe/keras.hpp"
#include "troupe/registry.hpp"

namespace troupe {

using core::Errc;
using core::make_error;

namespace {

// The job's wire form: msgpack of plain fields.
struct WireTable {
  std::string layer;
  int64_t max_rows = 0;
  int32_t shards = 0, min_count = 1;
  float admit_probability = 1.0f;
  int64_t ttl_steps = 0, sketch_width = 0;
  MSGPACK_DEFINE(layer, max_rows, shards, min_count, admit_probability, ttl_steps, sketch_width);
};

struct WireJob {
  std::string name, sha256;
  std::vector<char> bytes;
  std::vector<std::pair<std::string, std::string>> labels;
  std::vector<WireTable> tables;
  std::string compile_json;
  uint64_t seed = 1;
  std::vector<std::string> files;
  std::vector<std::string> validation;
  std::string format;
  uint64_t batch = 32;
  uint64_t shuffle_buffer = 0;
  uint64_t data_seed = 1;
  std::string csv_delimiter = ",";
  std::string device = "cpu", precision = "float32";
  MSGPACK_DEFINE(name, sha256, bytes, labels, tables, compile_json, seed, files, format, batch,
                 shuffle_buffer, data_seed, csv_delimiter, device, precision, validation);
};

// The model this worker process trains, installed by the "keras" dataset.
struct Installed {
  std::mutex mu;
  std::string sha256;
  std::shared_ptr<detail::GraphReplica> replica;
  KerasJob job;
  std::shared_ptr<const std::vector<core::Batch>> validation;  // read on first use
};

Installed& installed() {
  static Installed i;
  return i;
}

// The replica the "keras" dataset installed in this process.
core::Expected<std::shared_ptr<detail::GraphReplica>> installed_replica(const StepContext& ctx) {
  std::lock_guard<std::mutex> lock(installed().mu);
  if (!installed().replica)
    return make_error(Errc::internal,
                      "no Keras model installed on worker " + std::to_string(ctx.worker_index()));
  return installed().replica;
}

// A batch of the worker's iterator through the installed model (detail::worker_step).
core::Expected<BatchStats> next_batch_step(StepContext& ctx, const PerWorkerDataset& ds,
                                           bool train) {
  auto batch = ctx.next_batch(ds);  // first: building the dataset installs the model
  if (!batch) return batch.error();
  if (!*batch) return make_error(Errc::out_of_range, "per-worker dataset '" + ds.name + "' ended");
  auto r = installed_replica(ctx);
  if (!r) return r.error();
  return detail::worker_step(ctx, **r, **batch, train);
}

// Validation batch `index` of the installed job's validation files (read once per job, in
// order, as the chief counts them) through the installed model.
core::Expected<BatchStats> installed_validation_step(StepContext& ctx, int64_t index) {
  auto r = installed_replica(ctx);
  if (!r) return r.error();
  std::shared_ptr<const std::vector<core::Batch>> batches;
  {
    auto& in = installed();
    std::lock_guard<std::mutex> lock(in.mu);
    if (!in.validation) {
      auto read = detail::read_validation(in.job, **r);
      if (!read) return read.error();
      in.validation = std::make_shared<const std::vector<core::Batch>>(std::move(*read));
    }
    batches = in.validation;
  }
  return detail::validation_step(ctx, **r, *batches, index);
}

}  // namespace

namespace detail {

core::Expected<BatchStats> worker_step(StepContext& ctx, GraphReplica& r, const core::Batch& batch,
                                       bool train) {
  auto values = ctx.pull(r.dense_names);
  if (!values) return values.error();
  auto& weights = r.graph().weights();
  for (size_t i = 0; i < r.dense.size(); ++i) {
    auto& w = weights[r.dense[i]].weight();
    auto& v = (*values)[i];
    if (v.shape() != w.shape)
      return make_error(Errc::internal,
                        "variable '" + r.dense_names[i] + "' has shape " + v.shape().to_string());
    if (w.value.device() == v.device())
      w.value = std::move(v);  // the pulled tensor itself, no copy
    else
      w.value.set(v);
  }
  const float scale = r.loss_scale ? r.loss_scale->scale() : 1.0f;
  auto stats = r.run(
      batch, train,
      [&](const std::vector<core::graph::TableUse>& uses) {
        std::vector<StepContext::RowsOf> want;
        for (size_t t = 0; t < uses.size(); ++t)
          want.push_back({r.table_names[t], &uses[t].ids, {}});
        return ctx.pull_rows(want);
      },
      scale);
  if (!stats || !train) return stats;
  if (!r.finish_scaled_step()) return stats;  // float16 overflow: nothing pushed
  // The step's changes to the PS tasks: the dense gradients (a non-trainable variable's
  // change, say a moving mean), and every table's row gradients.
  std::vector<std::pair<std::string, core::ConstTensorView>> grads;
  for (size_t w : r.dense)
    grads.emplace_back(r.names[w], r.trains[w] ? r.host_gradient(w) : r.change(w));
  if (auto st = ctx.push(grads); !st) return st.error();
  std::vector<StepContext::RowsOf> row_grads;
  size_t t = 0;
  for (size_t w = 0; w < r.names.size(); ++w) {
    if (!r.table[w]) continue;
    const auto& use = r.tables()[t++];
    if (!r.trains[w] || use.ids.empty()) continue;
    row_grads.push_back({r.names[w], &use.ids, r.host_gradient(w)});
  }
  if (!row_grads.empty())
    if (auto st = ctx.push_rows(row_grads); !st) return st.error();
  return stats;
}

core::Expected<BatchStats> validation_step(StepContext& ctx, GraphReplica& r,
                                           const std::vector<core::Batch>& batches, int64_t index) {
  if (index < 0 || index >= static_cast<int64_t>(batches.size()))
    return make_error(Errc::out_of_range, "validation batch " + std::to_string(index) + " of " +
                                              std::to_string(batches.size()) + " does not exist");
  return worker_step(ctx, r, batches[static_cast<size_t>(index)], /*train=*/false);
}

core::Expected<std::vector<core::Batch>> read_validation(const KerasJob& job,
                                                         const GraphReplica& r) {
  core::NamedInputOptions o = job.data;
  o.features = feature_specs(r);
  o.drop_remainder = false;  // every validation example counts
  return core::read_named_batches(job.validation, o);
}

}  // namespace detail

core::Expected<std::shared_ptr<const KerasSource>> worker_keras_source(Model& model) {
  const auto& source = model.spec().keras;
  const auto& replica = model.state().replica;
  if (!source) return make_error(Errc::invalid_argument, "not a Keras model");
  if (!replica.status) return replica.status.error();
  const auto& loaded = replica.graph->loaded;
  if (!loaded.weights_from_file) return source;  // a description: no weights to leave out
  std::map<std::string, core::Tensor> dense;
  for (const auto& ref : loaded.model.graph->weights())
    if (!ref.weight().table) dense[ref.path] = ref.weight().value.to(core::Device::cpu());
  auto bytes = core::keras::without_tables(loaded, dense);
  if (!bytes) return bytes.error();
  auto out = std::make_shared<KerasSource>();
  out->name = source->name;
  out->sha256 = source->sha256;
  out->bytes = std::move(*bytes);
  return std::shared_ptr<const KerasSource>(std::move(out));
}

std::vector<char> encode_keras_job(const KerasJob& job) {
  WireJob w;
  w.name = job.source->name;
  w.sha256 = job.source->sha256;
  w.bytes.assign(job.source->bytes.begin(), job.source->bytes.end());
  for (const auto& [k, v] : job.options.labels)
    w.labels.emplace_back(k, v);
  for (const auto& [layer, t] : job.options.dynamic_tables)
    w.tables.push_back({layer, t.max_rows, t.shards, t.min_count, t.admit_probability, t.ttl_steps,
                        t.sketch_width});
  w.compile_json = job.options.compile_json;
  w.seed = job.options.seed;
  w.files = job.files;
  w.validation = job.validation;
  w.format = core::data_format_name(job.data.format);
  w.batch = job.data.batch;
  w.shuffle_buffer = job.data.shuffle_buffer;
  w.data_seed = job.data.seed;
  w.csv_delimiter = std::string(1, job.data.csv_delimiter);
  w.device = job.device;
  w.precision = job.precision;
  return encode_value(w);
}

core::Expected<KerasJob> decode_keras_job(const std::vector<char>& bytes) {
  auto w = decode<WireJob>(bytes);
  if (!w) return make_error(Errc::invalid_argument, "a Keras job: " + w.error().message);
  auto source = std::make_shared<KerasSource>();
  source->name = w->name;
  source->sha256 = w->sha256;
  source->bytes.assign(w->bytes.begin(), w->bytes.end());
  KerasJob job;
  job.source = std::move(source);
  for (const auto& [k, v] : w->labels)
    job.options.labels[k] = v;
  for (const auto& t : w->tables) {
    DynamicTableSpec s;
    s.max_rows = t.max_rows;
    s.shards = t.shards;
    s.min_count = t.min_count;
    s.admit_probability = t.admit_probability;
    s.ttl_steps = t.ttl_steps;
    s.sketch_width = t.sketch_width;
    job.options.dynamic_tables[t.layer] = s;
  }
  job.options.compile_json = w->compile_json;
  job.options.seed = w->seed;
  job.files = w->files;
  job.validation = w->validation;
  auto format = core::parse_data_format(w->format);
  if (!format) return format.error();
  job.data.format = *format;
  job.data.batch = static_cast<size_t>(w->batch);
  job.data.shuffle_buffer = static_cast<size_t>(w->shuffle_buffer);
  job.data.seed = w->data_seed;
  job.data.csv_delimiter = w->csv_delimiter.empty() ? ',' : w->csv_delimiter[0];
  job.device = w->device;
  job.precision = w->precision;
  return job;
}

void register_keras(Registry& registry) {
  registry.add_dataset_with_args(
      "keras", [](const core::InputContext& ctx, const std::vector<char>& args) {
        auto job = decode_keras_job(args).value();  // thrown: the dataset's error, named
        auto& in = installed();
        std::shared_ptr<detail::GraphReplica> replica;
        {
          std::lock_guard<std::mutex> lock(in.mu);
          if (in.sha256 == job.source->sha256 && in.replica) replica = in.replica;
        }
        if (!replica) {
          auto made = detail::GraphReplica::make(*job.source, job.options, /*worker_copy=*/true);
          replica = std::shared_ptr<detail::GraphReplica>(std::move(made.value()));
          if (auto st = replica->place(job.device, job.precision); !st)
            throw core::BadExpectedAccess(st.error());
        }
        auto specs = detail::feature_specs(*replica);
        {
          std::lock_guard<std::mutex> lock(in.mu);
          if (in.replica != replica || in.job.validation != job.validation ||
              in.job.data.format != job.data.format || in.job.data.batch != job.data.batch)
            in.validation.reset();  // another job's: read again when first asked
          in.sha256 = job.source->sha256;
          in.replica = replica;
          in.job = job;
        }
        core::NamedInputOptions o = job.data;
        o.features = std::move(specs);
        return core::named_input(job.files, ctx, o);
      });
  registry.add_step("keras/train", [](StepContext& ctx, PerWorkerDataset ds) {
    return next_batch_step(ctx, ds, /*train=*/true);
  });
  // The compiled loss and metrics of one batch under the PS tasks' variables as they are:
  // nothing is pushed (ClusterCoordinator.schedule(model.evaluate_step)).
  registry.add_step("keras/evaluate", [](StepContext& ctx, PerWorkerDataset ds) {
    return next_batch_step(ctx, ds, /*train=*/false);
  });
  // Distributed validation (Model::evaluate_distributed): batch `index` of the job's
  // validation files. A closure that runs again elsewhere computes the same batch.
  registry.add_step("keras/validate", [](StepContext& ctx, int64_t index) {
    return installed_validation_step(ctx, index);
  });
}

core::Status save_keras(Model& model, const std::string& path) {
  const auto& g = model.state().replica.graph;
  if (!g)
    return core::make_error(core::Errc::invalid_argument,
                            "model '" + model.spec().name + "' is not a Keras model");
  for (size_t w = 0; w < g->keyed.size(); ++w)
    if (g->keyed[w])
      return core::make_error(
          core::Errc::invalid_argument,
          path + ": '" + g->names[w] + "' is a dynamic table, which a Keras Embedding cannot hold");
  auto ckpt = model.read_weights();
  if (!ckpt) return ckpt.error();
  return core::keras::save_model(path, g->loaded, std::move(ckpt->tensors));
}

}  // namespace troupe
