// `troupe train` and `troupe predict` on the Keras models a team brings
// (tests/keras/model_fixtures.py): each trains in one process and learns (its held-out loss
// falls below the untrained model's), and Keras itself loads the trained file and predicts
// what Troupe predicts on the same inputs (1e-5, tests/keras/check_predictions.py). One
// trains as a job of 2 PS tasks and 2 workers with a worker killed; bad inputs are errors
// named before training, and no output is written. The built-in models (ctr_ps's, and
// fmnist_fit's MLP), exported as .keras files, load in Keras too.

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "run_program.hpp"

namespace fs = std::filesystem;
using troupe::test::run_program;

namespace {

const std::string bin = TROUPE_BIN_DIR;
const std::string fixtures = TROUPE_KERAS_FIXTURES;
const std::string python = TROUPE_KERAS_PYTHON;
const std::string scripts = TROUPE_SOURCE_DIR "/tests/keras";

struct Fixture {
  std::string dir;
  nlohmann::json info;
};

Fixture fixture(const std::string& name) {
  Fixture f{fixtures + "/models/" + name, nullptr};
  std::ifstream in(f.dir + "/info.json");
  INFO("fixture " << f.dir);
  REQUIRE(in.good());
  f.info = nlohmann::json::parse(in);
  return f;
}

std::string temp_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("troupe-keras-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// troupe predict's metrics on the held-out file, and its predictions written to `out`.
nlohmann::json predict(const std::string& model, const Fixture& f, const std::string& out) {
  auto r = run_program(bin + "/troupe predict --model " + model + " --data " + f.dir +
                       "/test.tfrecord --batch 100 --predictions " + out + " 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r.last_json;
}

// Keras itself loads `trained` and predicts on the fixture's held-out inputs what Troupe's
// `predictions` file holds.
void check_with_keras(const std::string& trained, const Fixture& f,
                      const std::string& predictions) {
  auto check = run_program("KERAS_BACKEND=" + f.info["backend"].get<std::string>() + " " + python +
                           " " + scripts + "/check_predictions.py " + trained + " " + f.dir +
                           "/test_inputs.npz " + predictions + " 2>&1");
  INFO(check.output);
  CHECK(check.exit_code == 0);
  CHECK(check.last_json["ok"] == true);
}

// Trains `name` in one process, then checks it learned and that Keras agrees with Troupe.
void train_and_check(const std::string& name) {
  const auto f = fixture(name);
  const std::string tmp = temp_dir(name);
  const std::string metric = f.info["metric"];
  const auto before = predict(f.dir + "/model.keras", f, tmp + "/before.json");
  auto r = run_program(bin + "/troupe train --model " + f.dir + "/model.keras --data " + f.dir +
                       "/train.tfrecord --batch 32 --steps " +
                       std::to_string(f.info["steps"].get<int>()) + " --validation " + f.dir +
                       "/test.tfrecord --out " + tmp + "/trained.keras 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.last_json["ok"] == true);
  CHECK(r.last_json["steps"] == f.info["steps"]);
  const auto after = predict(tmp + "/trained.keras", f, tmp + "/after.json");
  INFO("before " << before.dump() << "\nafter " << after.dump());
  CHECK(after["loss"].get<double>() < before["loss"].get<double>());
  // The validation run and troupe predict score the same examples with the same weights.
  CHECK(std::abs(r.last_json["val_loss"].get<double>() - after["loss"].get<double>()) < 1e-4);
  CHECK(after.contains(metric));
  check_with_keras(tmp + "/trained.keras", f, tmp + "/after.json");
  fs::remove_all(tmp);
}

}  // namespace

TEST_CASE("The TensorFlow PS tutorial's model (StringLookup, Embedding, Dense) trains",
          "[keras][models]") {
  train_and_check("ps_tutorial");
}

TEST_CASE("The MultiWorkerMirroredStrategy tutorial's CNN trains", "[keras][models]") {
  train_and_check("mwms_cnn");
}

TEST_CASE("DeepFM as a graph (Embedding, FactorizationMachine, MLP) trains", "[keras][models]") {
  train_and_check("deepfm");
}

TEST_CASE("Wide&Deep with a multi-hot history trains", "[keras][models]") {
  train_and_check("wide_deep");
}

TEST_CASE("DCN-v2 (TFRS Cross, full and low rank) trains", "[keras][models]") {
  train_and_check("dcn_v2");
}

TEST_CASE("A cross network written with keras.ops arithmetic trains", "[keras][models][ops]") {
  train_and_check("ops_cross");
}

TEST_CASE("An embedding tower shaped with stack, expand_dims, matmul and take trains",
          "[keras][models][ops]") {
  train_and_check("ops_tower");
}

TEST_CASE("A model normalizing by constants baked into it trains", "[keras][models][ops]") {
  train_and_check("ops_constant");
}

TEST_CASE("A two-output CTR+CVR model with BatchNormalization and Dropout trains",
          "[keras][models]") {
  train_and_check("two_output");
}

TEST_CASE("A model's to_json() trains from its layers' initializers and goes back to Keras",
          "[keras][models]") {
  // No weights and no compile settings in the JSON: those of the .keras file's compile().
  const auto f = fixture("wide_deep");
  const std::string tmp = temp_dir("json");
  auto r =
      run_program(bin + "/troupe train --model " + f.dir + "/model.json --data " + f.dir +
                  "/train.tfrecord --batch 32 --steps 200 --validation " + f.dir +
                  "/test.tfrecord --out " + tmp + "/trained.keras --compile '" +
                  R"({"optimizer": {"class_name": "Adagrad", "config": {"learning_rate": 0.1}},)" +
                  R"( "loss": "binary_crossentropy", "metrics": ["auc"]}')" + " 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.last_json["val_auc"].get<double>() > 0.6);
  const auto after = predict(tmp + "/trained.keras", f, tmp + "/after.json");
  check_with_keras(tmp + "/trained.keras", f, tmp + "/after.json");
  fs::remove_all(tmp);
}

TEST_CASE(
    "A Keras model trains as a job of 2 PS tasks, 2 workers and an evaluator, surviving a "
    "killed worker",
    "[keras][models][cluster]") {
  const auto f = fixture("deepfm");
  const std::string tmp = temp_dir("cluster");
  auto r = run_program(bin +
                       "/troupe launch --ps 2 --workers 2 --evaluator --restart-failed "
                       "--chaos kill:worker:1@1s --run-dir " +
                       tmp + "/run -- " + bin + "/troupe train --model " + f.dir +
                       "/model.keras --data " + f.dir +
                       "/train.tfrecord --batch 32 --epochs 10 --steps 1000 --validation " + f.dir +
                       "/test.tfrecord --out " + tmp + "/trained.keras 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& chief = r.last_json["chief"];
  CHECK(chief["ok"] == true);
  CHECK(chief["steps"] == 10000);
  CHECK(chief["workers_lost"].get<int>() >= 1);
  CHECK(chief["worker_rejoins"].get<int>() >= 1);
  CHECK(r.last_json["injections"] == 1);
  // The workers scored the validation batches (each once: the AUC is Keras's below).
  CHECK(chief["validation"] == "distributed");
  // What the PS tasks hold at the end is what Keras loads and predicts with.
  const auto after = predict(tmp + "/trained.keras", f, tmp + "/after.json");
  CHECK(std::abs(chief["val_auc"].get<double>() - after["auc"].get<double>()) < 1e-6);
  CHECK(after["auc"].get<double>() > 0.6);
  // The side-car evaluator followed the chief's checkpoints (one an epoch; it may skip some
  // when they come faster than it scores) and scored the last one as the chief did.
  const auto& evaluations = r.last_json["evaluator"];
  REQUIRE(evaluations.size() >= 2);
  const auto& summary = evaluations.back();
  CHECK(summary["evaluations"].get<int>() >= 1);
  CHECK(summary["last_step"] == 10000);
  CHECK(summary["auc"].get<double>() == Approx(chief["val_auc"].get<double>()).margin(1e-9));
  check_with_keras(tmp + "/trained.keras", f, tmp + "/after.json");
  fs::remove_all(tmp);
}

TEST_CASE("An Embedding made a dynamic table trains on the PS tasks by raw keys",
          "[keras][models][cluster]") {
  const auto f = fixture("deepfm");
  const std::string tmp = temp_dir("dynamic");
  auto run = [&](const std::string& extra) {
    return run_program(bin + "/troupe launch --ps 2 --workers 2 --run-dir " + tmp + "/run" + extra +
                       " -- " + bin + "/troupe train --model " + f.dir + "/model.keras --data " +
                       f.dir + "/train.tfrecord --batch 32 --steps 300 --validation " + f.dir +
                       "/test.tfrecord --dynamic-table embedding --dynamic-max-rows 100000 2>&1");
  };
  auto r = run("");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& chief = r.last_json["chief"];
  CHECK(chief["ok"] == true);
  CHECK(chief["val_auc"].get<double>() > 0.6);
  // A dynamic table has no fixed vocabulary: a Keras Embedding cannot hold it.
  auto out = run_program(bin + "/troupe train --model " + f.dir + "/model.keras --data " + f.dir +
                         "/train.tfrecord --steps 10 --dynamic-table embedding --out " + tmp +
                         "/t.keras 2>&1");
  CHECK(out.exit_code == 1);
  CHECK_THAT(out.last_json["error"].get<std::string>(), Catch::Contains("dynamic table"));
  fs::remove_all(tmp);
}

TEST_CASE("Each built-in CTR model ctr_ps trains goes back to Keras as a .keras file",
          "[keras][models][cluster][ctr]") {
  // ctr_ps's LR, FM, DeepFM and Wide&Deep (hand-wired) under 2 PS tasks and 2 workers,
  // exported from the PS tasks as .keras files: troupe predict scores the held-out file as
  // the chief's own evaluation did, and Keras predicts what Troupe predicts.
  const auto f = fixture("builtin_ctr");
  const std::string tmp = temp_dir("builtin");
  for (const char* kind : {"deepfm", "wide_deep", "fm", "lr"}) {
    INFO(kind);
    const std::string model = tmp + "/" + kind + ".keras";
    auto r = run_program(bin + "/troupe launch --ps 2 --workers 2 --run-dir " + tmp + "/run-" +
                         kind + " -- " + bin + "/ctr_ps --data " + f.dir + " --heldout " + f.dir +
                         "/test.tfrecord --format tfrecord --model " + kind +
                         " --dim 4 --hidden 16 --hidden 8 --buckets-per-field 64 --batch 128 "
                         "--steps-per-worker 60 --export " +
                         model + " 2>&1");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto& chief = r.last_json["chief"];
    REQUIRE(chief["ok"] == true);
    CHECK(chief["export"]["final"] == true);
    const auto scored = predict(model, f, tmp + "/" + kind + ".json");
    CHECK(scored["examples"] == 512);
    CHECK(scored["loss"].get<double>() == Approx(chief["logloss"].get<double>()).epsilon(1e-6));
    check_with_keras(model, f, tmp + "/" + kind + ".json");
  }
  // And the export trains on as an ordinary Keras model (its compile settings: ctr_ps's
  // Adagrad and rate, binary cross-entropy from logits).
  const auto before = predict(tmp + "/deepfm.keras", f, tmp + "/before.json");
  auto more = run_program(bin + "/troupe train --model " + tmp + "/deepfm.keras --data " + f.dir +
                          "/train-00000-of-00001.tfrecord --batch 128 --steps 60 --out " + tmp +
                          "/more.keras 2>&1");
  INFO(more.output);
  REQUIRE(more.exit_code == 0);
  const auto after = predict(tmp + "/more.keras", f, tmp + "/after.json");
  CHECK(after["loss"].get<double>() < before["loss"].get<double>());
  fs::remove_all(tmp);
}

TEST_CASE("fmnist_fit's built-in MLP goes back to Keras as a .keras file",
          "[keras][models][cluster]") {
  // Trained under 2 PS tasks and 2 workers, written by the chief from the PS tasks' values:
  // troupe predict scores Fashion-MNIST's test set as the chief's own evaluation did, and
  // Keras predicts what Troupe predicts (on the CNN fixture's images).
  const auto f = fixture("mwms_cnn");
  const std::string tmp = temp_dir("fmnist");
  auto r = run_program(bin + "/troupe launch --ps 2 --workers 2 --run-dir " + tmp + "/run -- " +
                       bin + "/fmnist_fit --epochs 1 --steps-per-epoch 200 --export " + tmp +
                       "/mlp.keras 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& chief = r.last_json["chief"];
  REQUIRE(chief["ok"] == true);
  CHECK(chief["export"] == tmp + "/mlp.keras");
  const std::string idx = "/usr/share/datasets/fashion-mnist/t10k-";
  auto scored =
      run_program(bin + "/troupe predict --model " + tmp + "/mlp.keras --format idx " + "--data " +
                  idx + "images-idx3-ubyte.gz," + idx + "labels-idx1-ubyte.gz 2>&1");
  INFO(scored.output);
  REQUIRE(scored.exit_code == 0);
  CHECK(scored.last_json["examples"] == 10000);
  CHECK(scored.last_json["loss"].get<double>() ==
        Approx(chief["test_loss"].get<double>()).epsilon(1e-6));
  CHECK(scored.last_json["accuracy"].get<double>() ==
        Approx(chief["test_accuracy"].get<double>()).margin(1e-9));
  predict(tmp + "/mlp.keras", f, tmp + "/mlp.json");
  check_with_keras(tmp + "/mlp.keras", f, tmp + "/mlp.json");
  fs::remove_all(tmp);
}

TEST_CASE("A Keras model trains as MultiWorkerMirroredStrategy's replicas on 2 workers",
          "[keras][models][cluster][mirrored]") {
  const auto f = fixture("two_output");  // BatchNormalization's statistics averaged
  const std::string tmp = temp_dir("mirrored");
  auto r = run_program(bin + "/troupe launch --workers 2 --run-dir " + tmp + "/run -- " + bin +
                       "/troupe train --model " + f.dir + "/model.keras --data " + f.dir +
                       "/train.tfrecord --batch 32 --epochs 2 --validation " + f.dir +
                       "/test.tfrecord --out " + tmp + "/trained.keras 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& chief = r.last_json["chief"];
  CHECK(chief["strategy"] == "mirrored");
  // Each replica read half of the examples each epoch: 8192 / 2 / 32 steps.
  CHECK(chief["steps"] == 2 * 8192 / 2 / 32);
  const auto after = predict(tmp + "/trained.keras", f, tmp + "/after.json");
  CHECK(std::abs(chief["val_ctr_auc"].get<double>() - after["ctr_auc"].get<double>()) < 1e-6);
  CHECK(after["ctr_auc"].get<double>() > 0.7);
  check_with_keras(tmp + "/trained.keras", f, tmp + "/after.json");
  fs::remove_all(tmp);
}

TEST_CASE("What Troupe cannot train is an error naming it, before training, writing nothing",
          "[keras][models][errors]") {
  const std::string tmp = temp_dir("errors");
  const auto deepfm = fixture("deepfm");
  auto train = [&](const std::string& model, const std::string& data) {
    return run_program(bin + "/troupe train --model " + model + " --data " + data +
                       " --steps 5 --out " + tmp + "/trained.keras 2>&1");
  };
  auto refused = [&](const troupe::test::ProgramRun& r, const std::string& what) {
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.last_json["ok"] == false);
    CHECK_THAT(r.last_json["error"].get<std::string>(), Catch::Contains(what));
    CHECK_FALSE(fs::exists(tmp + "/trained.keras"));
    CHECK(r.output.find("step ") == std::string::npos);  // no training step ran
  };
  SECTION("an unsupported layer") {
    const auto f = fixture("unsupported");
    refused(train(f.dir + "/model.keras", f.dir + "/train.tfrecord"), "layer 'lstm' (LSTM)");
  }
  SECTION("a damaged .keras file") {
    std::ifstream in(deepfm.dir + "/model.keras", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(tmp + "/half.keras", std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    refused(train(tmp + "/half.keras", deepfm.dir + "/train.tfrecord"), "half.keras");
  }
  SECTION("an input the data does not have") {
    const auto other = fixture("wide_deep");
    refused(train(deepfm.dir + "/model.keras", other.dir + "/train.tfrecord"), "'cat'");
  }
  SECTION("an input of another shape") {
    const auto other = fixture("dcn_v2");  // cat has 6 ids an example, DeepFM takes 8
    refused(train(deepfm.dir + "/model.keras", other.dir + "/train.tfrecord"), "cat");
  }
  fs::remove_all(tmp);
}

TEST_CASE("A hostile model file is a clear error naming it, never a crash or a huge allocation",
          "[keras][models][errors]") {
  // Each was the end of `troupe train` (a stack overflow, std::bad_alloc): now an error
  // before anything of that size is allocated, the valid model beside them training.
  const std::string tmp = temp_dir("hostile");
  const auto f = fixture("hostile");
  auto train = [&](const std::string& file) {
    return run_program(bin + "/troupe train --model " + f.dir + "/" + file + " --data " + f.dir +
                       "/train.tfrecord --batch 8 --steps 2 --out " + tmp + "/trained.keras 2>&1");
  };
  auto refused = [&](const std::string& file, const std::vector<std::string>& says) {
    const auto r = train(file);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    REQUIRE(r.last_json.is_object());
    CHECK(r.last_json["ok"] == false);
    const std::string e = r.last_json["error"].get<std::string>();
    CHECK_THAT(e, Catch::Contains(file));
    for (const auto& s : says)
      CHECK_THAT(e, Catch::Contains(s));
    CHECK_FALSE(fs::exists(tmp + "/trained.keras"));
  };
  SECTION("a config.json nested 200,000 arrays deep") {
    refused("deep.keras", {"config.json", "nested", "levels deep"});
  }
  SECTION("a Dense of 2^40 units") {
    refused("dense_2_40.keras", {"layer 'hidden' (Dense)", "1099511627776"});
  }
  SECTION("an input of 2^40 values an example") {
    refused("input_2_40.keras", {"input 'num'", "1099511627776"});
  }
  SECTION("the same model, unchanged, trains") {
    const auto r = train("model.keras");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(fs::exists(tmp + "/trained.keras"));
  }
  fs::remove_all(tmp);
}
