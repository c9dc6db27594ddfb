// Synchronous data-parallel training of Fashion-MNIST with MultiWorkerMirroredStrategy:
//
//   build/bin/troupe launch --workers 2 -- build/bin/fmnist_mirrored
//
// Every worker holds a replica of the MLP 784-128-10 (--model: cnn, deep_mlp; each as its
// Keras form's layer graph, core/keras/classifier_graph.hpp), takes its
// shard of each global batch (128 by default: 64 per worker with two), and all-reduces the
// gradients every step over the ring, bucket by bucket as the backward pass finishes them
// (the late layers' while the earlier ones compute; --no-overlap: all after it); SGD lr
// 0.1, 938 steps (two epochs of the 60k images). The chief (worker 0)
// writes the checkpoints (--model-dir); the other workers write theirs to temporary
// directories they remove, as in TensorFlow's multi-worker tutorial. With --elastic a
// worker that dies is left behind and the others carry on; started again (troupe launch
// --restart-failed), it is brought up to date and takes part again. Without TF_CONFIG it
// trains as a single worker. Every worker ends with one JSON line (launch prints the
// chief's): examples_per_sec, test_accuracy, and what elastic mode did.
#include <chrono>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint_manager.hpp"
#include "core/json_text.hpp"
#include "core/keras/classifier_graph.hpp"
#include "core/keras/classifier_trainer.hpp"
#include "device_flags.hpp"
#include "examples/command_line.hpp"
#include "fmnist_data.hpp"
#include "net/ports.hpp"
#include "program.hpp"
#include "troupe/mirrored_strategy.hpp"

using namespace troupe;
using clock_type = std::chrono::steady_clock;

namespace {

int fail(const std::string& what) {
  return troupe::examples::fail("fmnist_mirrored", what);
}

int fail(const troupe::core::Error& e) {
  return troupe::examples::fail("fmnist_mirrored", e);
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fashion-MNIST with MultiWorkerMirroredStrategy (run under troupe launch)"};
  int64_t steps = 938, global_batch = 128, checkpoint_every = 0;
  float lr = 0.1f;
  uint64_t seed = 1;
  size_t shuffle_buffer = 10000;
  std::string data_dir = core::fashion_mnist_dir, model_dir, communication = "auto",
              model_name = "mlp";
  MirroredOptions mo;
  int64_t timeout_ms = 60000, rejoin_timeout_ms = 10000;
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--global-batch", global_batch)->check(CLI::PositiveNumber);
  app.add_option("--model", model_name, "mlp, cnn or deep_mlp")
      ->check(CLI::IsMember({"mlp", "cnn", "deep_mlp"}));
  app.add_option("--lr", lr);
  app.add_option("--seed", seed);
  app.add_option("--shuffle-buffer", shuffle_buffer)->check(CLI::PositiveNumber);
  app.add_option("--data-dir", data_dir);
  app.add_option("--model-dir", model_dir,
                 "checkpoints: the chief's here, the others' in temporary directories under it "
                 "(default: $TROUPE_RUN_DIR/fmnist_mirrored when launched)");
  app.add_option("--checkpoint-every-steps", checkpoint_every, "also save every K steps")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--communication", communication, "auto, ring or nccl");
  app.add_option("--bytes-per-pack", mo.bytes_per_pack, "gradient fusion bucket size");
  bool tcp_only = false, no_overlap = false;
  app.add_flag("--no-overlap", no_overlap,
               "all-reduce the gradients after the backward pass, not bucket by bucket during it");
  app.add_flag("--no-shared-memory", tcp_only,
               "ring links over TCP only, even between workers on one host");
  app.add_option("--timeout-ms", timeout_ms, "collective timeout (the stall report)");
  app.add_flag("--elastic", mo.elastic, "carry on when workers die; take them back");
  app.add_option("--min-workers", mo.min_workers, "elastic: fewer workers than this end the job");
  app.add_option("--rejoin-timeout-ms", rejoin_timeout_ms);
  examples::DeviceFlags device_flags;
  device_flags.add(app);
  examples::WireFlag wire_flag;  // the gradients' all-reduce
  wire_flag.add(app);
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "fmnist_mirrored"))
    return *end;
  const auto t_start = clock_type::now();

  auto comm = collective::parse_communication(communication);
  if (!comm) return fail(comm.error());
  mo.communication = *comm;
  const auto wire_or = wire_flag.parse();
  if (!wire_or) return fail(wire_or.error());
  const core::DType wire = net::element_type(*wire_or);
  mo.gradient_wire = wire;
  mo.shared_memory = !tcp_only;
  const bool overlap = !no_overlap;
  mo.timeout = std::chrono::milliseconds(timeout_ms);
  mo.rejoin_timeout = std::chrono::milliseconds(rejoin_timeout_ms);

  // The cluster: TF_CONFIG's, or this process alone.
  std::unique_ptr<net::ClusterResolver> resolver;
  if (std::getenv("TF_CONFIG") != nullptr) {
    auto r = net::TFConfigClusterResolver::from_env();
    if (!r) return fail(r.error());
    resolver = std::make_unique<net::TFConfigClusterResolver>(*r);
  } else {
    auto lease = net::PortLease::acquire();
    if (lease.port() == 0) return fail("no free port on 127.0.0.1");
    const std::string address = "127.0.0.1:" + std::to_string(lease.port());
    lease.release();
    resolver = std::make_unique<net::SimpleClusterResolver>(
        net::ClusterSpec({{"worker", {address}}}), net::TaskId{"worker", 0});
  }
  if (model_dir.empty())
    if (const char* run_dir = std::getenv("TROUPE_RUN_DIR"))
      model_dir = std::string(run_dir) + "/fmnist_mirrored";

  // This worker's device: "cuda" takes the GPU of its local rank among the workers of its
  // host (TF_CONFIG), so workers spread over a host's GPUs.
  auto choice = device_flags.choose("fmnist_mirrored");
  if (!choice) return fail(choice.error());
  mo.device = choice->device;

  auto strategy_or = MultiWorkerMirroredStrategy::make(*resolver, mo);
  if (!strategy_or) return fail(strategy_or.error());
  auto& strategy = **strategy_or;

  // Every replica starts from the same values: built with the same seed, then the chief's
  // broadcast (mirror) makes sure of it.
  auto model = core::keras::make_classifier(model_name, seed);  // its Keras form's graph
  if (!model) return fail(model.error());
  if (auto st = (*model)->to(choice->device, choice->precision); !st) return fail(st.error());
  auto optimizer = core::make_optimizer("sgd", lr);
  if (!optimizer) return fail(optimizer.error());
  core::keras::ClassifierTrainer trainer(**model, **optimizer);
  std::vector<collective::Buffer> state, grads;
  for (size_t i = 0; i < trainer.parameters().size(); ++i) {
    auto& p = trainer.parameters()[i];
    state.push_back({p.value->data(), static_cast<size_t>(p.value->size()), p.value->device()});
    grads.push_back({p.grad->data(), static_cast<size_t>(p.grad->size()), p.grad->device()});
    for (auto& slot : trainer.slots()[i].slots)
      state.push_back({slot.data(), static_cast<size_t>(slot.size()), slot.device()});
  }
  if (auto st = strategy.mirror(state); !st) return fail(st.error());

  // Each worker's shard: its part of every global batch. Elastic membership may leave a
  // global batch that does not divide; the replicas then take the rounded-down share.
  auto data = strategy.distribute_datasets_from_function([&](const core::InputContext& ctx) {
    auto per = ctx.per_replica_batch_size(global_batch);
    const int64_t batch =
        per ? *per : std::max<int64_t>(1, global_batch / ctx.num_replicas_in_sync);
    return examples::fmnist_train_batches("fmnist_mirrored", data_dir, ctx, static_cast<int>(batch),
                                          seed, shuffle_buffer);
  });

  auto save = [&](int64_t step) -> core::Status {
    if (model_dir.empty()) return {};
    core::CheckpointManager ckpts(strategy.checkpoint_dir(model_dir), 3);
    core::Checkpoint c;
    for (const auto& p : trainer.parameters())
      c.tensors[p.name] = p.value->to(core::Device::cpu());  // the chief reads device variables
    c.ints["step"] = {step};
    auto saved = ckpts.save(c, step);
    if (!saved) return saved.error();
    return strategy.remove_temporary_checkpoint_dir(model_dir);
  };

  int64_t examples = 0;
  core::Mean train_loss;
  double train_s = 0.0;
  const auto t_train = clock_type::now();
  while (strategy.step() < steps) {
    float loss = 0.0f;
    int64_t batch_examples = 0;
    auto outcome = strategy.run([&](ReplicaContext& ctx) -> core::Status {
      auto next = data.next();
      if (!next) return next.error();
      auto& b = *next;
      if (!b) return core::make_error(core::Errc::out_of_range, "the training data ended");
      if (!overlap) {  // reduce every gradient after the backward pass
        auto l = trainer.compute_gradients(b->features, b->classes.data());
        if (!l) return l.error();
        if (auto st = ctx.all_reduce(ReduceOp::mean, grads, wire); !st) return st;
        loss = *l;
        batch_examples = b->size() * ctx.num_replicas_in_sync();
        return trainer.apply_gradients();
      }
      // Buckets of the late layers' gradients are reduced while the earlier ones compute.
      BucketedAllReduce reduce(ctx, ReduceOp::mean, grads, wire);
      auto l = trainer.compute_gradients(b->features, b->classes.data(),
                                         [&](size_t i) { reduce.ready(i); });
      if (!l) return l.error();
      if (auto st = reduce.finish(); !st) return st;
      loss = *l;
      batch_examples = b->size() * ctx.num_replicas_in_sync();
      return trainer.apply_gradients();
    });
    if (!outcome) return fail(outcome.error());
    if (*outcome == StepOutcome::done) {
      examples += batch_examples;
      train_loss.update(loss, 1.0);
      if (checkpoint_every > 0 && strategy.step() % checkpoint_every == 0)
        if (auto st = save(strategy.step()); !st) return fail(st.error());
    }
  }
  train_s = seconds_since(t_train);
  if (auto st = save(strategy.step()); !st) return fail(st.error());
  auto mean_loss = strategy.reduce(ReduceOp::mean, train_loss.result());
  if (!mean_loss) return fail(mean_loss.error());

  // The replicas are equal: each evaluates the same weights on the test set.
  auto test = core::load_fashion_mnist(data_dir, "t10k");
  if (!test) return fail(test.error());
  core::Accuracy accuracy;
  core::Mean test_loss;
  auto it = core::to_batches(core::from_vector(std::move(*test)), 1000, false).make_iterator();
  while (auto b = it->next())
    if (auto st = trainer.evaluate_batch(b->features, b->classes.data(), accuracy, test_loss); !st)
      return fail(st.error());

  const auto stats = strategy.stats();
  nlohmann::json result{
      {"ok", true},
      {"program", "fmnist_mirrored"},
      {"chief", strategy.is_chief()},
      {"model", model_name},
      {"workers", strategy.num_replicas_in_sync()},
      {"worker_index", strategy.worker_index()},
      {"global_batch", global_batch},
      {"learning_rate", lr},
      {"steps", strategy.step()},
      {"examples", examples},
      {"examples_per_sec", train_s > 0 ? static_cast<double>(examples) / train_s : 0.0},
      {"train_loss", *mean_loss},
      {"test_loss", test_loss.result()},
      {"test_accuracy", accuracy.result()},
      {"elastic", mo.elastic},
      {"communication", collective::to_string(mo.communication)},
      {"wire_dtype", net::wire_dtype_name(*wire_or)},
      {"ring_bytes_sent", stats.ring_bytes_sent},
      {"generation", strategy.generation()},
      {"reforms", stats.reforms},
      {"workers_lost", stats.workers_lost},
      {"workers_joined", stats.workers_joined},
      {"steps_redone", stats.steps_redone},
      {"shared_memory_links", stats.shared_memory_links},
      {"tls_links", stats.tls_links},
      {"overlap", overlap},
      {"buckets_overlapped", stats.collectives_submitted},
      {"model_dir", model_dir},
      {"train_s", train_s},
      {"wall_s", seconds_since(t_start)}};
  examples::report(result, *choice, trainer.loss_scale());
  std::cout << troupe::core::json_text(result) << std::endl;
  return 0;
}
