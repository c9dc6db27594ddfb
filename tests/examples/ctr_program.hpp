#pragma once

// What the ctr_ps program tests share: ctr_datagen's files, ctr_ps under troupe launch,
// and troupe predict scoring an exported model as the chief did.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "helpers.hpp"
#include "launch_helpers.hpp"
#include "run_program.hpp"

namespace troupe::test::ctr {

inline const std::string bin = TROUPE_BIN_DIR;

// ctr_datagen's files into DIR/data; its JSON line.
inline nlohmann::json generate(const troupe::test::TempDir& dir, const std::string& args) {
  auto gen = run_program(bin + "/ctr_datagen --out " + dir.file("data") + " " + args);
  INFO(gen.output);
  REQUIRE(gen.exit_code == 0);
  return gen.last_json;
}

inline nlohmann::json launch_ctr(const troupe::test::TempDir& dir, const std::string& cluster,
                                 const std::string& args) {
  auto r =
      run_program(bin + "/troupe launch " + cluster + " --run-dir " + dir.file("run") + " -- " +
                  bin + "/ctr_ps --data " + dir.file("data") + " " + args + " 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.last_json.is_object());
  troupe::test::check_all_gone(r.last_json["tasks"]);
  const auto chief = r.last_json["chief"];
  REQUIRE(chief["ok"] == true);
  return chief;
}

// `troupe predict` with the model at `path` scores `heldout` as ctr_ps's chief did.
inline void check_served(const std::string& path, const std::string& heldout,
                         const nlohmann::json& chief) {
  auto scored = run_program(bin + "/troupe predict --model " + path + " --data " + heldout +
                            (heldout.size() > 9 && heldout.substr(heldout.size() - 9) == ".tfrecord"
                                 ? " --format tfrecord"
                                 : "") +
                            " 2>&1");
  INFO(scored.output);
  REQUIRE(scored.exit_code == 0);
  CHECK(scored.last_json["examples"] == chief["eval_examples"]);
  CHECK(scored.last_json["auc"].get<double>() == Approx(chief["auc"].get<double>()).margin(1e-5));
  CHECK(scored.last_json["logloss"].get<double>() ==
        Approx(chief["logloss"].get<double>()).epsilon(1e-4));
}

}  // namespace troupe::test::ctr
