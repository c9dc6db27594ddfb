// Runs the shipped fmnist_local program and checks the accuracy it reports in its final
// JSON line.
#include <catch2/catch.hpp>

#include <string>

#include "run_program.hpp"

namespace {

nlohmann::json run_last_json_line(const std::string& args) {
  auto r = troupe::test::run_program(std::string(TROUPE_BIN_DIR) + "/fmnist_local " + args);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.last_json.is_object());
  return r.last_json;
}

}  // namespace

TEST_CASE("fmnist_local trains the MLP to >= 0.83 test accuracy in 2 epochs", "[example][mlp]") {
  auto r = run_last_json_line("--model mlp --epochs 2");
  CHECK(r["ok"] == true);
  CHECK(r["steps"] == 938);
  CHECK(r["test_accuracy"].get<double>() >= 0.83);
  CHECK(r["examples_per_sec"].get<double>() > 0.0);
}

TEST_CASE("fmnist_local trains the tutorial CNN to >= 0.88 test accuracy in 2 epochs",
          "[example][cnn]") {
  auto r = run_last_json_line("--model cnn --epochs 2");
  CHECK(r["ok"] == true);
  CHECK(r["optimizer"] == "rmsprop");
  CHECK(r["test_accuracy"].get<double>() >= 0.88);
}

TEST_CASE("fmnist_local reports a missing dataset as an error line", "[example]") {
  auto r = troupe::test::run_program(std::string(TROUPE_BIN_DIR) +
                                     "/fmnist_local --data-dir /nonexistent 2>/dev/null");
  CHECK(r.exit_code != 0);
  REQUIRE(r.last_json.is_object());
  CHECK(r.last_json["ok"] == false);
  CHECK_THAT(r.last_json["error"].get<std::string>(),
             Catch::Contains("/nonexistent/train-images-idx3-ubyte.gz"));
}

TEST_CASE("fmnist_local reports a path that is not UTF-8 as an error line", "[example]") {
  // Exit 1 with an error line, not an abort (134) while writing that line.
  auto r =
      troupe::test::run_program(std::string(TROUPE_BIN_DIR) +
                                "/fmnist_local --data-dir $(printf '/no\\377where') 2>/dev/null");
  CHECK(r.exit_code == 1);
  REQUIRE(r.last_json.is_object());
  CHECK(r.last_json["ok"] == false);
  CHECK_THAT(r.last_json["error"].get<std::string>(),
             Catch::Contains("/no") && Catch::Contains("where/train-images-idx3-ubyte.gz"));
}
