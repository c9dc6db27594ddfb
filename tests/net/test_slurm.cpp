// The cluster of a Slurm job step, as TensorFlow's SlurmClusterResolver reads it.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "net/cluster_spec.hpp"
#include "net/slurm.hpp"

using namespace troupe;
using Hosts = std::vector<std::string>;

TEST_CASE("Slurm hostlists and tasks per node expand in order", "[net][slurm]") {
  CHECK(*net::expand_hostlist("n1") == Hosts{"n1"});
  CHECK(*net::expand_hostlist("n[1-2],m5,o[3-4,6,7-9]") ==
        Hosts{"n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"});
  CHECK(*net::expand_hostlist("gpu[07-10]") == Hosts{"gpu07", "gpu08", "gpu09", "gpu10"});
  CHECK(*net::expand_hostlist("b,a,b") == Hosts{"b", "a", "b"});  // no sorting, no dedup
  for (const char* bad : {"", "n[1-", "n[3-1]", "n[a-b]", "n]1[", "n[1-2]x"}) {
    auto r = net::expand_hostlist(bad);
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Errc::invalid_argument);
    CHECK_THAT(r.error().message, Catch::Contains("hostlist"));
  }
  CHECK(*net::expand_tasks_per_node("3(x2),2,1") == std::vector<int>{3, 3, 2, 1});
  CHECK(*net::expand_tasks_per_node("5") == std::vector<int>{5});
  for (const char* bad : {"", "x", "2(x0)", "2(x", "-1"})
    CHECK_FALSE(net::expand_tasks_per_node(bad).ok());
  auto huge = net::expand_hostlist("n[0-99999999]");
  REQUIRE_FALSE(huge.ok());  // refused before a hundred million names are made
  CHECK_THAT(huge.error().message, Catch::Contains("65536"));
}

TEST_CASE("Slurm ranks map to jobs in name order over nodes sorted by name", "[net][slurm]") {
  // Nodes b (3 tasks) and a (2): a's tasks come first, on ports 9000 and 9001.
  const std::map<std::string, int> jobs{{"worker", 2}, {"ps", 2}, {"chief", 1}};
  auto r = net::SlurmClusterResolver::make(3, "b,a", "3,2", jobs, 9000);
  REQUIRE(r.ok());
  const auto& spec = r->cluster_spec();
  CHECK(spec.jobs().at("chief") == Hosts{"a:9000"});
  CHECK(spec.jobs().at("ps") == Hosts{"a:9001", "b:9000"});
  CHECK(spec.jobs().at("worker") == Hosts{"b:9001", "b:9002"});
  CHECK(r->task().to_string() == "worker:0");
  CHECK(net::SlurmClusterResolver::make(0, "b,a", "3,2", jobs, 9000)->task().to_string() ==
        "chief:0");

  auto more = net::SlurmClusterResolver::make(0, "n[1-2]", "2(x2)", {{"worker", 5}});
  REQUIRE_FALSE(more.ok());
  CHECK_THAT(more.error().message, Catch::Contains("ask for 5 tasks but the step has 4"));
  CHECK_FALSE(net::SlurmClusterResolver::make(0, "n[1-3]", "2", {{"worker", 2}}).ok());
  CHECK_FALSE(net::SlurmClusterResolver::make(4, "n1", "4", {{"worker", 4}}).ok());
  CHECK(net::default_ps_jobs(5) ==
        std::map<std::string, int>{{"chief", 1}, {"ps", 2}, {"worker", 2}});
  CHECK(net::default_ps_jobs(2) ==
        std::map<std::string, int>{{"chief", 1}, {"ps", 1}, {"worker", 0}});
}

TEST_CASE("Without TF_CONFIG a Slurm task's cluster becomes its TF_CONFIG", "[net][slurm]") {
  struct Env {
    std::vector<std::string> names;
    void set(const std::string& n, const std::string& v) {
      ::setenv(n.c_str(), v.c_str(), 1);
      names.push_back(n);
    }
    ~Env() {
      for (const auto& n : names)
        ::unsetenv(n.c_str());
    }
  } env;
  ::unsetenv("TF_CONFIG");
  env.names.push_back("TF_CONFIG");
  env.set("SLURM_PROCID", "2");
  env.set("SLURM_STEP_NUM_TASKS", "5");
  env.set("SLURM_STEP_NODELIST", "localhost");
  env.set("SLURM_STEP_TASKS_PER_NODE", "5");
  env.set(net::slurm_port_base_env, "23000");
  auto r = net::TFConfigClusterResolver::from_env(net::default_ps_jobs);
  REQUIRE(r.ok());
  CHECK(r->task().to_string() == "ps:1");
  CHECK(r->cluster_spec().address({"worker", 1}) == "localhost:23004");
  const char* tf_config = std::getenv("TF_CONFIG");
  REQUIRE(tf_config != nullptr);
  CHECK(net::TFConfigClusterResolver::parse(tf_config)->task().to_string() == "ps:1");
  // Jobs given: every task a worker when TROUPE_SLURM_JOBS says so; malformed, an error.
  ::unsetenv("TF_CONFIG");
  env.set(net::slurm_jobs_env, "{\"worker\": 5}");
  CHECK(net::TFConfigClusterResolver::from_env(net::default_ps_jobs)->task().to_string() ==
        "worker:2");
  ::unsetenv("TF_CONFIG");
  env.set(net::slurm_jobs_env, "{\"worker\": \"five\"}");
  auto bad = net::TFConfigClusterResolver::from_env();
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("TROUPE_SLURM_JOBS"));
  ::unsetenv("SLURM_PROCID");
  CHECK_THAT(net::TFConfigClusterResolver::from_env().error().message,
             Catch::Contains("TF_CONFIG is not set"));
}
