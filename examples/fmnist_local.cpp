// Fashion-MNIST in one process: the MLP 784-128-10 (SGD) or the multi-worker tutorial's CNN
// (RMSprop), each as its Keras form's layer graph (core/keras/classifier_graph.hpp),
// trained for a few epochs and evaluated on the 10k test images. The last line of output
// is one JSON object with the results.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint_manager.hpp"
#include "core/data/dataset.hpp"
#include "core/data/idx.hpp"
#include "core/json_text.hpp"
#include "core/keras/classifier_graph.hpp"
#include "core/keras/classifier_trainer.hpp"
#include "device_flags.hpp"
#include "examples/command_line.hpp"
#include "program.hpp"

namespace tc = troupe::core;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

int fail(const troupe::core::Error& e) {
  return troupe::examples::fail("fmnist_local", e);
}

tc::Checkpoint snapshot(tc::keras::ClassifierTrainer& trainer, int64_t step, int64_t epoch) {
  tc::Checkpoint c;
  for (size_t i = 0; i < trainer.parameters().size(); ++i) {
    const auto& p = trainer.parameters()[i];
    c.tensors[p.name] = p.value->to(tc::Device::cpu());
    const auto& slots = trainer.slots()[i];
    for (size_t s = 0; s < slots.slots.size(); ++s)
      c.tensors[p.name + "/slot_" + std::to_string(s)] = slots.slots[s].to(tc::Device::cpu());
    c.ints[p.name + "/iterations"] = {slots.iterations};
  }
  c.ints["step"] = {step};
  c.ints["epoch"] = {epoch};
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train Fashion-MNIST in one process"};
  std::string model_name = "mlp", optimizer_name, data_dir = tc::fashion_mnist_dir, ckpt_dir;
  int epochs = 2, batch = 128;
  int64_t max_steps = -1;
  float lr = -1.0f;
  uint64_t seed = 1;
  size_t shuffle_buffer = 60000;
  app.add_option("--model", model_name, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--optimizer", optimizer_name,
                 "sgd, momentum, nesterov, adagrad, adam, rmsprop "
                 "(default: sgd for mlp, rmsprop for cnn)");
  app.add_option("--lr", lr, "learning rate (default: 0.1 for sgd, 0.001 otherwise)");
  app.add_option("--epochs", epochs)->check(CLI::PositiveNumber);
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--max-steps", max_steps, "stop after this many steps (for quick runs)");
  app.add_option("--seed", seed);
  app.add_option("--shuffle-buffer", shuffle_buffer)->check(CLI::PositiveNumber);
  app.add_option("--data-dir", data_dir);
  app.add_option("--checkpoint-dir", ckpt_dir, "save a checkpoint after every epoch");
  troupe::examples::DeviceFlags device_flags;
  device_flags.add(app);
  troupe::examples::WireFlag wire;  // accepted for the programs' common flags; float32 only
  wire.add(app);
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "fmnist_local")) return *end;
  const auto wire_type = wire.parse();
  if (!wire_type) return fail(wire_type.error());
  if (*wire_type != troupe::net::WireDtype::float32)
    return fail(tc::make_error(tc::Errc::invalid_argument,
                               "--wire-dtype " + wire.value +
                                   ": fmnist_local is one process and sends no tensors "
                                   "(fmnist_ps and fmnist_mirrored take it)"));

  if (optimizer_name.empty()) optimizer_name = model_name == "mlp" ? "sgd" : "rmsprop";
  if (lr <= 0.0f) lr = optimizer_name == "sgd" ? 0.1f : 0.001f;

  const auto t_start = clock_type::now();
  auto choice = device_flags.choose("fmnist_local");
  if (!choice) return fail(choice.error());
  auto train = tc::load_fashion_mnist(data_dir, "train");
  if (!train) return fail(train.error());
  auto test = tc::load_fashion_mnist(data_dir, "t10k");
  if (!test) return fail(test.error());
  const double load_s = seconds_since(t_start);

  auto model = tc::keras::make_classifier(model_name, seed);  // its Keras form's graph
  if (!model) return fail(model.error());
  if (auto st = (*model)->to(choice->device, choice->precision); !st) return fail(st.error());
  auto optimizer = tc::make_optimizer(optimizer_name, lr);
  if (!optimizer) return fail(optimizer.error());
  tc::keras::ClassifierTrainer trainer(**model, **optimizer);
  std::optional<tc::CheckpointManager> ckpts;
  if (!ckpt_dir.empty()) ckpts.emplace(ckpt_dir, 3);

  const auto train_ds =
      tc::to_batches(tc::from_vector(std::move(*train)).shuffle(shuffle_buffer, seed),
                     static_cast<size_t>(batch),
                     /*drop_remainder=*/false)
          .prefetch(4);
  const auto test_ds = tc::to_batches(tc::from_vector(std::move(*test)), 1000, false);

  int64_t steps = 0, examples = 0;
  double train_s = 0.0;
  tc::Mean epoch_loss;
  bool stop = false;
  for (int epoch = 1; epoch <= epochs && !stop; ++epoch) {
    epoch_loss.reset();
    auto it = train_ds.make_iterator();
    const auto t0 = clock_type::now();
    while (auto b = it->next()) {
      auto loss = trainer.train_step(b->features, b->classes.data());
      if (!loss) return fail(loss.error());
      epoch_loss.update(*loss, static_cast<double>(b->size()));
      ++steps;
      examples += b->size();
      if (max_steps > 0 && steps >= max_steps) {
        stop = true;
        break;
      }
    }
    train_s += seconds_since(t0);
    std::cout << "epoch " << epoch << ": steps " << steps << ", train loss " << epoch_loss.result()
              << ", " << static_cast<int64_t>(examples / train_s) << " examples/s" << std::endl;
    if (ckpts) {
      auto saved = ckpts->save(snapshot(trainer, steps, epoch), steps);
      if (!saved) return fail(saved.error());
    }
  }

  tc::Accuracy accuracy;
  tc::Mean test_loss;
  auto it = test_ds.make_iterator();
  while (auto b = it->next()) {
    if (auto st = trainer.evaluate_batch(b->features, b->classes.data(), accuracy, test_loss); !st)
      return fail(st.error());
  }

  nlohmann::json result{
      {"ok", true},
      {"program", "fmnist_local"},
      {"model", model_name},
      {"optimizer", optimizer_name},
      {"learning_rate", lr},
      {"batch", batch},
      {"epochs", epochs},
      {"steps", steps},
      {"examples", examples},
      {"examples_per_sec", train_s > 0 ? examples / train_s : 0.0},
      {"wire_dtype", troupe::net::wire_dtype_name(*wire_type)},
      {"train_loss", epoch_loss.result()},
      {"test_loss", test_loss.result()},
      {"test_accuracy", accuracy.result()},
      {"load_s", load_s},
      {"train_s", train_s},
      {"wall_s", seconds_since(t_start)},
  };
  troupe::examples::report(result, *choice, trainer.loss_scale());
  std::cout << troupe::core::json_text(result) << std::endl;
  return 0;
}
