// fit() in one process and each built-in callback: checkpoints, backup and resume,
// TensorBoard summaries, the JSONL log, early stopping and the progress display.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "event_records.hpp"
#include "helpers.hpp"
#include "job/job_registry.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

Registry data_registry() {
  Registry r;
  test::add_blobs_datasets(r);
  return r;
}

// The exact values of every parameter, for comparing two models.
std::vector<std::vector<float>> values_of(Model& m) {
  std::vector<std::vector<float>> out;
  for (auto& p : m.parameters())
    out.emplace_back(p.value->data(), p.value->data() + p.value->size());
  return out;
}

// Fails fit() once at the given step (at a batch-level point) or after an epoch: a chief
// that dies there.
class FailAt : public Callback {
 public:
  FailAt(int64_t step, int64_t epoch, int64_t interval)
      : step_(step), epoch_(epoch), interval_(interval) {}
  core::Status on_train_batch_end(FitState& s, const Logs&) override {
    if (s.step == step_)
      return core::make_error(core::Errc::cancelled, "killed at step " + std::to_string(s.step));
    return {};
  }
  core::Status on_epoch_end(FitState& s, const Logs&) override {
    if (s.epoch == epoch_) return core::make_error(core::Errc::cancelled, "killed after an epoch");
    return {};
  }
  int64_t batch_interval() const override { return interval_; }

 private:
  int64_t step_, epoch_, interval_;
};

std::vector<nlohmann::json> jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("a Keras model that cannot be read is an error naming it, before any step",
          "[fit][graph]") {
  const auto reg = data_registry();
  ModelSpec spec = test::blobs_model();
  spec.name = "empty";
  spec.keras = keras_source("truncated.json", R"({"class_name": "Functional", "config": {)");
  Model empty(spec);
  FitOptions o;
  o.validation = FitOptions::Validation::direct;
  auto bad = fit(empty, {&reg, "blobs_train"}, o);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("truncated.json") != std::string::npos);
  auto eval = empty.evaluate();
  REQUIRE_FALSE(eval.ok());
  CHECK(eval.error().message.find("truncated.json") != std::string::npos);
}

TEST_CASE("fit trains in one process, epoch by epoch, and validates", "[fit]") {
  const auto reg = data_registry();
  Model model(test::blobs_model());
  const double before = test::accuracy(model, model.evaluate().value());
  FitOptions o;
  o.epochs = 3;
  o.validation = FitOptions::Validation::direct;
  auto h = fit(model, {&reg, "blobs_train"}, o);
  REQUIRE(h.ok());
  REQUIRE(h->epochs.size() == 3);
  CHECK(h->steps == 48);  // 512 examples in batches of 32, three passes
  CHECK(h->steps_run == 48);
  CHECK_FALSE(h->stopped_early);
  CHECK(h->epochs[2].at("loss") < h->epochs[0].at("loss"));
  CHECK(h->epochs[2].at("val_accuracy") > 0.9);
  CHECK(h->epochs[2].at("val_accuracy") > before);
  CHECK(h->epochs[2].at("examples_per_sec") > 0);
  // The logged validation is the model's evaluation now.
  auto now = model.evaluate();
  REQUIRE(now.ok());
  CHECK(now->examples == 256);
  CHECK(test::accuracy(model, *now) == h->epochs[2].at("val_accuracy"));

  SECTION("steps_per_epoch past the end of the data is an error naming the dataset") {
    o.steps_per_epoch = 20;
    auto bad = fit(model, {&reg, "blobs_train"}, o);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code == core::Errc::out_of_range);
    CHECK(bad.error().message.find("blobs_train") != std::string::npos);
  }
  SECTION("an unknown dataset is not_found") {
    auto bad = fit(model, {&reg, "nope"}, o);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code == core::Errc::not_found);
  }
}

// Records the logs of every batch-level call; reads them or not (reads_batch_logs).
class BatchLogs : public Callback {
 public:
  explicit BatchLogs(bool reads) : reads_(reads) {}
  core::Status on_train_batch_end(FitState&, const Logs& logs) override {
    seen.push_back(logs);
    return {};
  }
  int64_t batch_interval() const override { return 1; }
  bool reads_batch_logs() const override { return reads_; }
  std::vector<Logs> seen;

 private:
  bool reads_;
};

TEST_CASE("fit computes batch logs only where a callback called there reads them",
          "[fit][callbacks]") {
  const auto reg = data_registry();
  FitOptions o;
  o.epochs = 1;
  SECTION("a point kept without reading gets no metrics computed") {
    Model model(test::blobs_model());
    auto point = std::make_shared<BatchLogs>(false);
    auto h = fit(model, {&reg, "blobs_train"}, o, {point});
    REQUIRE(h.ok());
    REQUIRE(point->seen.size() == 16);  // 512 examples, batches of 32: every step
    for (const auto& logs : point->seen)
      CHECK(logs.empty());
  }
  SECTION("beside one that reads, both get the step's logs") {
    Model model(test::blobs_model());
    auto point = std::make_shared<BatchLogs>(false);
    auto reader = std::make_shared<BatchLogs>(true);
    auto h = fit(model, {&reg, "blobs_train"}, o, {point, reader});
    REQUIRE(h.ok());
    REQUIRE(reader->seen.size() == 16);
    CHECK(point->seen == reader->seen);
    // The epoch's metrics so far, as Keras's batch logs: at the last step, the epoch's.
    CHECK(reader->seen.back().at("loss") == h->epochs[0].at("loss"));
    CHECK(reader->seen.back().at("accuracy") == h->epochs[0].at("accuracy"));
    CHECK(reader->seen.back().count("loss") == 1);
    CHECK(reader->seen.back().count("accuracy") == 1);
  }
}

TEST_CASE("ModelCheckpoint keeps the newest checkpoints, marks the final one, restores exactly",
          "[fit][callbacks]") {
  const auto reg = data_registry();
  test::TempDir dir;
  Model model(test::blobs_model());
  FitOptions o;
  o.epochs = 3;
  auto ckpt = std::make_shared<callbacks::ModelCheckpoint>(
      dir.file("ckpt"), callbacks::ModelCheckpoint::Options{2, 0, false, "val_loss"});
  REQUIRE(fit(model, {&reg, "blobs_train"}, o, {ckpt}).ok());
  CHECK(ckpt->saves() == 3);
  core::CheckpointManager m(dir.file("ckpt"), 0);
  const auto kept = m.checkpoints();
  REQUIRE(kept.size() == 2);
  CHECK(kept[0].first == 32);
  CHECK(kept[1].first == 48);
  auto marker = nlohmann::json::parse(std::ifstream(dir.file("ckpt/final.json")));
  CHECK(marker["step"] == 48);
  CHECK(marker["path"] == kept[1].second);

  // The newest checkpoint, loaded into a fresh model, is the trained model.
  auto c = core::read_checkpoint(kept[1].second);
  REQUIRE(c.ok());
  CHECK(c->ints.at("step") == std::vector<int64_t>{48});
  CHECK(c->ints.at("epoch") == std::vector<int64_t>{2});
  Model restored(test::blobs_model());
  REQUIRE(restored.set_weights(*c).ok());
  CHECK(values_of(restored) == values_of(model));

  // A checkpoint missing a variable is refused and changes nothing.
  c->tensors.erase(c->tensors.begin());
  Model fresh(test::blobs_model());
  const auto initial = values_of(fresh);
  auto bad = fresh.set_weights(*c);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == core::Errc::invalid_argument);
  CHECK(values_of(fresh) == initial);

  SECTION("save_best_only saves only when the monitored metric improves") {
    // Learning rate 0: the validation loss never changes, so only the first epoch saves.
    Model still(test::blobs_model("sgd", 0.0f));
    o.validation = FitOptions::Validation::direct;
    auto best = std::make_shared<callbacks::ModelCheckpoint>(
        dir.file("best"), callbacks::ModelCheckpoint::Options{5, 0, true, "val_loss"});
    REQUIRE(fit(still, {&reg, "blobs_train"}, o, {best}).ok());
    CHECK(best->saves() == 1);
    CHECK(core::CheckpointManager(dir.file("best"), 0).checkpoints().size() == 1);
  }
  SECTION("save_freq_steps saves every so many steps") {
    auto often = std::make_shared<callbacks::ModelCheckpoint>(
        dir.file("often"), callbacks::ModelCheckpoint::Options{0, 10, false, "val_loss"});
    REQUIRE(fit(model, {&reg, "blobs_train"}, o, {often}).ok());
    // Steps 10, 20, 30, 40 (the count goes on from 0 in a new fit) and the final one, 48.
    std::vector<int64_t> steps;
    for (const auto& [s, p] : core::CheckpointManager(dir.file("often"), 0).checkpoints())
      steps.push_back(s);
    CHECK(steps == std::vector<int64_t>{10, 20, 30, 40, 48});
  }
}

TEST_CASE("BackupAndRestore resumes a killed run where its backup was, to the same weights",
          "[fit][callbacks]") {
  const auto reg = data_registry();
  test::TempDir dir;
  // Momentum: the optimizer's slots must come back too, or the weights would differ.
  const auto spec = test::blobs_model("momentum", 0.05f);
  FitOptions o;
  o.epochs = 3;
  o.steps_per_epoch = 16;
  Model reference(spec);
  REQUIRE(fit(reference, {&reg, "blobs_train"}, o).ok());

  const bool mid_epoch = GENERATE(false, true);
  CAPTURE(mid_epoch);
  callbacks::BackupAndRestoreCallback::Options bo;
  bo.save_freq_steps = mid_epoch ? 8 : 0;
  {
    Model first(spec);
    auto backup = std::make_shared<callbacks::BackupAndRestoreCallback>(dir.file("backup"), bo);
    // Killed at step 24 (mid-epoch, just after a backup) or after the second epoch.
    auto kill = std::make_shared<FailAt>(24, mid_epoch ? -1 : 1, mid_epoch ? 8 : 0);
    auto h = fit(first, {&reg, "blobs_train"}, o, {backup, kill});
    REQUIRE_FALSE(h.ok());
    CHECK(h.error().code == core::Errc::cancelled);
    CHECK_FALSE(backup->resumed());
  }
  Model second(spec);  // a new process: fresh weights
  auto backup = std::make_shared<callbacks::BackupAndRestoreCallback>(dir.file("backup"), bo);
  auto h = fit(second, {&reg, "blobs_train"}, o, {backup});
  REQUIRE(h.ok());
  CHECK(backup->resumed());
  CHECK(h->initial_step == (mid_epoch ? 24 : 32));
  CHECK(h->initial_epoch == (mid_epoch ? 1 : 2));
  CHECK(h->steps == 48);
  CHECK(h->steps_run == 48 - h->initial_step);
  CHECK(h->epochs.size() == (mid_epoch ? 2u : 1u));
  CHECK(values_of(second) == values_of(reference));
  // Trained: the backup is gone.
  CHECK(core::CheckpointManager(dir.file("backup"), 0, "backup").checkpoints().empty());
}

namespace {

// The backup an adam run left in dir/backup when it died after its first epoch.
std::vector<std::pair<int64_t, std::string>> backup_of_a_killed_run(const Registry& reg,
                                                                    const test::TempDir& dir,
                                                                    const FitOptions& o) {
  Model first(test::blobs_model("adam", 0.01f));
  auto backup = std::make_shared<callbacks::BackupAndRestoreCallback>(dir.file("backup"));
  auto kill = std::make_shared<FailAt>(-1, 0, 0);  // dies after the first epoch
  REQUIRE_FALSE(fit(first, {&reg, "blobs_train"}, o, {backup, kill}).ok());
  auto kept = core::CheckpointManager(dir.file("backup"), 0, "backup").checkpoints();
  REQUIRE(kept.size() == 1);
  return kept;
}

}  // namespace

TEST_CASE("A backup of another optimizer is refused, naming both, and kept", "[fit][callbacks]") {
  const auto reg = data_registry();
  test::TempDir dir;
  FitOptions o;
  o.epochs = 2;
  o.steps_per_epoch = 16;
  const auto kept = backup_of_a_killed_run(reg, dir, o);
  Model second(test::blobs_model("sgd", 0.1f));
  auto backup = std::make_shared<callbacks::BackupAndRestoreCallback>(dir.file("backup"));
  auto h = fit(second, {&reg, "blobs_train"}, o, {backup});
  REQUIRE_FALSE(h.ok());
  CHECK(h.error().code == core::Errc::invalid_argument);
  CHECK_THAT(h.error().message, Catch::Contains("'adam'") && Catch::Contains("'sgd'") &&
                                    Catch::Contains(dir.file("backup")));
  CHECK_FALSE(backup->resumed());
  // Nothing already saved is lost.
  CHECK(core::CheckpointManager(dir.file("backup"), 0, "backup").checkpoints() == kept);
}

TEST_CASE("Every backup damaged: fit() fails with data_loss naming it and keeps the files",
          "[fit][callbacks]") {
  const auto reg = data_registry();
  test::TempDir dir;
  FitOptions o;
  o.epochs = 2;
  o.steps_per_epoch = 16;
  const auto kept = backup_of_a_killed_run(reg, dir, o);
  auto bytes = test::read_bytes(kept[0].second);
  bytes[bytes.size() / 2] ^= 0x10;
  test::write_bytes(kept[0].second, bytes);
  Model second(test::blobs_model("adam", 0.01f));
  auto backup = std::make_shared<callbacks::BackupAndRestoreCallback>(dir.file("backup"));
  auto h = fit(second, {&reg, "blobs_train"}, o, {backup});
  // Not a fresh start (that is for an empty directory): the saved state was lost.
  REQUIRE_FALSE(h.ok());
  CHECK(h.error().code == core::Errc::data_loss);
  CHECK_THAT(h.error().message, Catch::Contains(kept[0].second));
  CHECK_FALSE(backup->resumed());
  CHECK(core::CheckpointManager(dir.file("backup"), 0, "backup").checkpoints() == kept);
  CHECK(test::read_bytes(kept[0].second) == bytes);
}

TEST_CASE("TensorBoard writes epoch and batch scalars, MetricsLog writes JSON lines",
          "[fit][callbacks][summary]") {
  const auto reg = data_registry();
  test::TempDir dir;
  Model model(test::blobs_model());
  FitOptions o;
  o.epochs = 2;
  o.validation = FitOptions::Validation::direct;
  auto tb = std::make_shared<callbacks::TensorBoard>(dir.file("logs"),
                                                     callbacks::TensorBoard::Options{4});
  auto log = std::make_shared<callbacks::MetricsLog>(dir.file("logs/metrics.jsonl"));
  auto h = fit(model, {&reg, "blobs_train"}, o, {tb, log});
  REQUIRE(h.ok());

  const auto train = test::read_scalars(dir.file("logs/train"));
  std::vector<test::Scalar> epoch_loss, batch_loss;
  for (const auto& s : train) {
    if (s.tag == "epoch_loss") epoch_loss.push_back(s);
    if (s.tag == "batch_loss") batch_loss.push_back(s);
  }
  REQUIRE(epoch_loss.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    CHECK(epoch_loss[e].step == static_cast<int64_t>(e));
    CHECK(epoch_loss[e].value == static_cast<float>(h->epochs[e].at("loss")));
  }
  REQUIRE(batch_loss.size() == 8);  // every 4 of 32 steps
  for (size_t i = 0; i < batch_loss.size(); ++i)
    CHECK(batch_loss[i].step == static_cast<int64_t>(4 * (i + 1)));
  // As Keras's, a batch's logs are the epoch's so far: at its last step, the epoch's.
  CHECK(batch_loss[3].value == epoch_loss[0].value);
  CHECK(batch_loss[7].value == epoch_loss[1].value);
  CHECK(batch_loss[4].value != epoch_loss[1].value);
  const auto val = test::read_scalars(dir.file("logs/validation"));
  std::vector<float> val_acc;
  for (const auto& s : val)
    if (s.tag == "epoch_accuracy") val_acc.push_back(s.value);
  REQUIRE(val_acc.size() == 2);
  CHECK(val_acc[1] == static_cast<float>(h->epochs[1].at("val_accuracy")));

  const auto lines = jsonl(dir.file("logs/metrics.jsonl"));
  REQUIRE(lines.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    CHECK(lines[e]["event"] == "epoch");
    CHECK(lines[e]["epoch"] == e);
    CHECK(lines[e]["step"] == 16 * (e + 1));
    CHECK(lines[e]["loss"].get<double>() == h->epochs[e].at("loss"));
    CHECK(lines[e]["val_accuracy"].get<double>() == h->epochs[e].at("val_accuracy"));
  }
}

TEST_CASE("EarlyStopping stops after `patience` epochs without improvement", "[fit][callbacks]") {
  const auto reg = data_registry();
  FitOptions o;
  o.epochs = 10;
  SECTION("a metric that never improves stops training") {
    Model still(test::blobs_model("sgd", 0.0f));  // the loss stays where it is
    auto stop = std::make_shared<callbacks::EarlyStopping>(
        callbacks::EarlyStopping::Options{"loss", 0.0, 2});
    auto h = fit(still, {&reg, "blobs_train"}, o, {stop});
    REQUIRE(h.ok());
    CHECK(h->epochs.size() == 3);  // the best at epoch 0, then two without improvement
    CHECK(h->stopped_early);
    CHECK(stop->stopped_epoch() == 2);
    CHECK(stop->best() == h->epochs[0].at("loss"));
  }
  SECTION("a metric missing from the logs never stops training") {
    Model model(test::blobs_model());
    o.epochs = 3;
    auto stop = std::make_shared<callbacks::EarlyStopping>(
        callbacks::EarlyStopping::Options{"val_loss", 0.0, 0});
    auto h = fit(model, {&reg, "blobs_train"}, o, {stop});
    REQUIRE(h.ok());
    CHECK(h->epochs.size() == 3);
    CHECK_FALSE(h->stopped_early);
    CHECK_FALSE(stop->stopped_epoch().has_value());
  }
}

// What a ProgressDisplay with these options draws over 2 epochs of 16 steps.
std::string progress_text(const callbacks::ProgressDisplay::Options& po) {
  const auto reg = data_registry();
  Model model(test::blobs_model());
  FitOptions o;
  o.epochs = 2;
  o.steps_per_epoch = 16;
  std::ostringstream out;
  auto progress = std::make_shared<callbacks::ProgressDisplay>(out, po);
  REQUIRE(fit(model, {&reg, "blobs_train"}, o, {progress}).ok());
  return out.str();
}

TEST_CASE("ProgressDisplay draws a live line on a terminal and plain lines otherwise",
          "[fit][callbacks]") {
  const bool terminal = GENERATE(false, true);
  CAPTURE(terminal);
  callbacks::ProgressDisplay::Options po;
  po.terminal = terminal;
  po.interval = std::chrono::milliseconds(0);  // a plain line after every step
  const std::string text = progress_text(po);
  INFO(text);
  CHECK(text.find("epoch 2/2  step 32  accuracy") != std::string::npos);  // the summary
  if (terminal) {
    // One line redrawn in place (carriage return, erase to the end of the line), with a bar.
    CHECK(text.find("\repoch 1/2  step 1/16 [=") != std::string::npos);
    CHECK(text.find("\x1b[K") != std::string::npos);
    CHECK(text.find("ETA ") != std::string::npos);
    CHECK(std::count(text.begin(), text.end(), '\n') == 2);  // the two summaries
  } else {
    CHECK(text.find('\r') == std::string::npos);
    CHECK(text.find("epoch 1/2  step 1/16  ") != std::string::npos);
    CHECK(text.find("examples/s  loss ") != std::string::npos);
    CHECK(text.find("ETA ") != std::string::npos);
    CHECK(std::count(text.begin(), text.end(), '\n') == 2 * 15 + 2);
  }
}

TEST_CASE("ProgressDisplay draws Keras's progress bar and Keras's line per epoch",
          "[fit][callbacks]") {
  using Style = callbacks::ProgressDisplay::Style;
  const Style style = GENERATE(Style::keras_bar, Style::keras_epoch);
  const bool terminal = GENERATE(false, true);
  CAPTURE(static_cast<int>(style), terminal);
  callbacks::ProgressDisplay::Options po;
  po.terminal = terminal;
  po.style = style;
  const std::string text = progress_text(po);
  INFO(text);
  CHECK(text.rfind("Epoch 1/2\n", 0) == 0);
  CHECK(text.find("Epoch 2/2\n") != std::string::npos);
  CHECK(std::count(text.begin(), text.end(), '\n') == 4);     // two headers, two epoch lines
  CHECK(text.find("examples_per_sec") == std::string::npos);  // Keras's logs only
  CHECK(text.find("epoch_s") == std::string::npos);
  const std::string full_bar = [] {
    std::string b;
    for (int i = 0; i < 20; ++i)
      b += "\u2501";
    return b;
  }();
  if (style == Style::keras_bar) {
    CHECK(text.find("16/16 " + full_bar + " ") != std::string::npos);
    CHECK(text.find("/step - accuracy: ") != std::string::npos);
    // Live on a terminal only: the first step's line, a twentieth of its bar done.
    CHECK((text.find("\r 1/16 \u2501\u2500") != std::string::npos) == terminal);
    CHECK((text.find("s/step - loss: ") != std::string::npos) == terminal);
  } else {
    CHECK(text.find("16/16 - ") != std::string::npos);
    CHECK(text.find("/step - accuracy: ") != std::string::npos);
    CHECK(text.find('\r') == std::string::npos);
    CHECK(text.find(full_bar) == std::string::npos);
  }
}

TEST_CASE("Progress carries the epoch's running loss and Keras's live bar shows it",
          "[fit][callbacks]") {
  // What fit() reports after each step: the epoch's mean loss so far, ending at History's.
  struct Recorder : Callback {
    std::vector<Progress> seen;
    void on_progress(const FitState&, const Progress& p) override { seen.push_back(p); }
  };
  const auto reg = data_registry();
  Model model(test::blobs_model());
  FitOptions o;
  o.epochs = 2;
  o.steps_per_epoch = 16;
  auto rec = std::make_shared<Recorder>();
  auto h = fit(model, {&reg, "blobs_train"}, o, {rec});
  REQUIRE(h.ok());
  REQUIRE(rec->seen.size() == 32);
  for (int e = 0; e < 2; ++e) {
    double sum = 0.0;  // the batches are of one size: the mean of their losses
    for (int i = 0; i < 16; ++i) {
      const Progress& p = rec->seen[static_cast<size_t>(e * 16 + i)];
      REQUIRE(p.epoch_step == i + 1);
      sum += p.loss;
      CHECK(p.epoch_loss == Approx(sum / (i + 1)).epsilon(1e-9));
    }
    CHECK(rec->seen[static_cast<size_t>(e * 16 + 15)].epoch_loss ==
          Approx(h->epochs[static_cast<size_t>(e)].at("loss")).epsilon(1e-6));
  }
  // The live line shows the running loss, not the last batch's.
  callbacks::ProgressDisplay::Options po;
  po.terminal = true;
  po.style = callbacks::ProgressDisplay::Style::keras_bar;
  std::ostringstream out;
  callbacks::ProgressDisplay bar(out, po);
  FitState s;
  s.options = &o;
  s.steps_per_epoch = 16;
  REQUIRE(bar.on_epoch_begin(s).ok());
  Progress p;
  p.epoch_step = 4;
  p.loss = 0.5;
  p.epoch_loss = 0.25;
  p.elapsed_s = 0.1;
  bar.on_progress(s, p);
  INFO(out.str());
  CHECK(out.str().find("- loss: 0.2500") != std::string::npos);
}

TEST_CASE("fit trains a CTR model in one process: AUC logged, the table updated by rows",
          "[fit][ctr]") {
  Registry reg;
  test::add_clicks_dataset(reg);
  Model model(test::ctr_model());
  REQUIRE(model.status().ok());
  const auto before = model.evaluate().value();
  const auto& params = model.parameters();
  const auto table_at = std::find_if(params.begin(), params.end(), [](const core::Parameter& p) {
    return p.name == "embedding/embeddings";
  });
  REQUIRE(table_at != params.end());
  const core::Tensor& table = *table_at->value;  // held here: a one-process fit trains it
  REQUIRE(table.shape() == core::Shape{64, 5});
  const std::vector<float> table_before(table.data(), table.data() + table.size());
  FitOptions o;
  o.epochs = 3;
  o.steps_per_epoch = 32;
  o.validation = FitOptions::Validation::direct;
  auto h = fit(model, {&reg, "clicks_repeat"}, o);
  REQUIRE(h.ok());
  const auto& last = h->epochs.back();
  REQUIRE(last.count("auc") == 1);
  REQUIRE(last.count("val_auc") == 1);
  // The teacher's own AUC on these clicks is about 0.8; a model that learned nothing 0.5.
  CHECK(model.logs(before).at("auc") < 0.6);
  CHECK(last.at("val_auc") > 0.72);
  CHECK(last.at("val_auc") == Approx(model.logs(model.evaluate().value()).at("auc")));
  CHECK(h->epochs.front().at("loss") > last.at("loss"));
  const core::Tensor& after = *table_at->value;
  int changed = 0;
  for (int64_t i = 0; i < after.size(); ++i)
    changed += after[i] != table_before[static_cast<size_t>(i)];
  CHECK(changed == 64 * 5);  // every row is used by some batch
}
