// The side-car evaluator: follows a checkpoint directory, survives a checkpoint deleted
// under it, writes summaries, stops at the final checkpoint, gives up when none comes.
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

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    out.push_back(nlohmann::json::parse(line));
  return out;
}

// A chief's run: `epochs` epochs of the blobs model with a checkpoint after each (all
// kept) and the final marker. Returns the checkpoints, oldest first.
std::vector<std::pair<int64_t, std::string>> train_with_checkpoints(Model& model,
                                                                    const std::string& dir,
                                                                    int64_t epochs) {
  Registry reg;
  test::add_blobs_datasets(reg);
  FitOptions o;
  o.epochs = epochs;
  auto ckpt = std::make_shared<callbacks::ModelCheckpoint>(
      dir, callbacks::ModelCheckpoint::Options{0, 0, false, "val_loss"});
  REQUIRE(fit(model, {&reg, "blobs_train"}, o, {ckpt}).ok());
  auto all = core::CheckpointManager(dir, 0).checkpoints();
  REQUIRE(all.size() == static_cast<size_t>(epochs));
  return all;
}

}  // namespace

TEST_CASE("the evaluator skips a checkpoint deleted while it was being read", "[evaluator]") {
  test::TempDir dir;
  Model trained(test::blobs_model());
  const auto all = train_with_checkpoints(trained, dir.file("ckpt"), 2);  // steps 16, 32
  const auto expected = trained.evaluate().value();
  const std::string final_marker = dir.file("ckpt/final.json");
  const std::string marker_text = [&] {
    std::ifstream in(final_marker);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();

  // The evaluator starts when only the first checkpoint is there. Just before it reads
  // it, the "chief" saves the second and (keeping one) deletes the first, then finishes.
  const std::string second_bytes = [&] {
    auto b = test::read_bytes(all[1].second);
    return std::string(b.begin(), b.end());
  }();
  fs::remove(all[1].second);
  fs::remove(final_marker);
  int reads = 0;
  SidecarEvaluatorOptions eo;
  eo.checkpoint_dir = dir.file("ckpt");
  eo.logdir = dir.file("logs");
  eo.poll_interval = std::chrono::milliseconds(10);
  eo.before_read = [&](const std::string& path) {
    if (++reads > 1) return;
    CHECK(path == all[0].second);
    std::ofstream(all[1].second, std::ios::binary) << second_bytes;
    fs::remove(path);
    std::ofstream(final_marker) << marker_text;
  };
  Model evaluator(test::blobs_model());  // never attached to a cluster
  std::ostringstream out;
  auto r = run_sidecar_evaluator(evaluator, eo, out);
  REQUIRE(r.ok());
  CHECK(r->skipped == 1);
  CHECK(r->evaluations == 1);
  CHECK(r->last_step == 32);
  const auto lines = json_lines(out.str());
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["checkpoint"] == all[1].second);
  CHECK(lines[0]["step"] == 32);
  CHECK(lines[0]["epoch"] == 1);
  CHECK(lines[0]["examples"] == 256);
  // The evaluator's numbers are the trained model's.
  CHECK(lines[0]["accuracy"].get<double>() == test::accuracy(trained, expected));
  CHECK(lines[0]["loss"].get<double>() == expected.loss());
  // Summaries: an event file and a JSONL line per evaluation.
  const auto scalars = test::read_scalars(dir.file("logs/eval"));
  REQUIRE(scalars.size() == 2);
  CHECK(scalars[0].tag == "evaluation_loss_vs_iterations");
  CHECK(scalars[0].step == 32);
  CHECK(scalars[1].tag == "evaluation_accuracy_vs_iterations");
  CHECK(scalars[1].value == static_cast<float>(test::accuracy(trained, expected)));
  std::ifstream jl(dir.file("logs/eval/metrics.jsonl"));
  std::string line;
  REQUIRE(std::getline(jl, line));
  CHECK(nlohmann::json::parse(line)["event"] == "evaluation");
}

TEST_CASE("the evaluator evaluates each new checkpoint and skips a damaged one", "[evaluator]") {
  test::TempDir dir;
  Model trained(test::blobs_model());
  const auto all = train_with_checkpoints(trained, dir.file("ckpt"), 3);  // 16, 32, 48
  // Hide the later ones and the marker; bring each back after the one before is read.
  std::vector<std::pair<std::string, std::vector<char>>> hidden;
  for (size_t i = 1; i < all.size(); ++i) {
    hidden.emplace_back(all[i].second, test::read_bytes(all[i].second));
    fs::remove(all[i].second);
  }
  // The middle one comes back damaged (a flipped byte in a record).
  hidden[0].second[hidden[0].second.size() / 2] ^= 0x10;
  const std::string marker = dir.file("ckpt/final.json");
  fs::rename(marker, dir.file("final.saved"));
  size_t next = 0;
  SidecarEvaluatorOptions eo;
  eo.checkpoint_dir = dir.file("ckpt");
  eo.poll_interval = std::chrono::milliseconds(10);
  eo.before_read = [&](const std::string&) {
    if (next < hidden.size()) {
      test::write_bytes(hidden[next].first, hidden[next].second);
      ++next;
    } else if (!fs::exists(marker)) {
      fs::rename(dir.file("final.saved"), marker);
    }
  };
  Model evaluator(test::blobs_model());
  std::ostringstream out;
  auto r = run_sidecar_evaluator(evaluator, eo, out);
  REQUIRE(r.ok());
  const auto lines = json_lines(out.str());
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["step"] == 16);
  CHECK(lines[1]["step"] == 48);  // 32 was damaged: skipped, not fatal
  CHECK(r->skipped == 1);
  CHECK(lines[1]["accuracy"].get<double>() == test::accuracy(trained, trained.evaluate().value()));
}

TEST_CASE("the evaluator gives up with a clear error when no checkpoint comes", "[evaluator]") {
  test::TempDir dir;
  SidecarEvaluatorOptions eo;
  eo.checkpoint_dir = dir.file("never");
  eo.poll_interval = std::chrono::milliseconds(5);
  eo.idle_timeout = std::chrono::milliseconds(50);
  Model evaluator(test::blobs_model());
  std::ostringstream out;
  auto r = run_sidecar_evaluator(evaluator, eo, out);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == core::Errc::unavailable);
  CHECK(r.error().message.find(dir.file("never")) != std::string::npos);
  CHECK(out.str().empty());
}

TEST_CASE("the side-car evaluator reports a CTR model's AUC", "[evaluator][ctr]") {
  test::TempDir dir;
  Registry reg;
  test::add_clicks_dataset(reg);
  Model trained(test::ctr_model());
  FitOptions o;
  o.epochs = 2;
  o.steps_per_epoch = 32;
  auto ckpt = std::make_shared<callbacks::ModelCheckpoint>(
      dir.file("ckpt"), callbacks::ModelCheckpoint::Options{0, 0, false, "val_loss"});
  REQUIRE(fit(trained, {&reg, "clicks_repeat"}, o, {ckpt}).ok());
  SidecarEvaluatorOptions eo;
  eo.checkpoint_dir = dir.file("ckpt");
  eo.logdir = dir.file("logs");
  Model evaluator(test::ctr_model());
  std::ostringstream out;
  auto r = run_sidecar_evaluator(evaluator, eo, out);
  REQUIRE(r.ok());
  const auto lines = json_lines(out.str());
  REQUIRE_FALSE(lines.empty());
  const auto& last = lines.back();
  CHECK(last["step"] == 64);
  REQUIRE(last.contains("auc"));
  CHECK(last["auc"].get<double>() == Approx(trained.logs(trained.evaluate().value()).at("auc")));
  CHECK(last["auc"].get<double>() > 0.7);
  bool auc_scalar = false;
  for (const auto& s : test::read_scalars(dir.file("logs/eval")))
    auc_scalar = auc_scalar || s.tag == "evaluation_auc_vs_iterations";
  CHECK(auc_scalar);
}
