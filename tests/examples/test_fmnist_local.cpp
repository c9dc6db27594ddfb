// Runs the shipped fmnist_local program and checks the accuracy it reports in its final
// JSON line.
#include <catch2/catch.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace {

nlohmann::json run_last_json_line(const std::string& args) {
  const std::string cmd = std::string(TROUPE_BIN_DIR) + "/fmnist_local " + args;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  REQUIRE(p);
  std::string last, line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p.get())) {
    line = buf;
    if (!line.empty() && line.front() == '{') last = line;
  }
  REQUIRE(pclose(p.release()) == 0);
  REQUIRE_FALSE(last.empty());
  return nlohmann::json::parse(last);
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
  const std::string cmd =
      std::string(TROUPE_BIN_DIR) + "/fmnist_local --data-dir /nonexistent 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  REQUIRE(p);
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p.get()))
    out += buf;
  const int status = pclose(p.release());
  CHECK(status != 0);
  auto j = nlohmann::json::parse(out.substr(out.rfind('{')));
  CHECK(j["ok"] == false);
  CHECK_THAT(j["error"].get<std::string>(),
             Catch::Contains("/nonexistent/train-images-idx3-ubyte.gz"));
}
