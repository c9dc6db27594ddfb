#include <catch2/catch.hpp>

#include <cstdlib>

#include "net/cluster_spec.hpp"
#include "net/node.hpp"

using namespace troupe::net;
using troupe::core::Errc;

namespace {

std::string error_of(const std::string& tf_config) {
  auto r = TFConfigClusterResolver::parse(tf_config);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Errc::invalid_argument);
  return r.error().message;
}

}  // namespace

TEST_CASE("TF_CONFIG as Kubeflow writes it is read", "[tf_config]") {
  auto r = TFConfigClusterResolver::parse(R"({
    "cluster": {"chief": ["127.0.0.1:2222"],
                "worker": ["127.0.0.1:2223", "127.0.0.1:2224"],
                "ps": ["127.0.0.1:2225"]},
    "task": {"type": "worker", "index": 1},
    "rpc_layer": "grpc"})");
  REQUIRE(r.ok());
  CHECK(r->task() == TaskId{"worker", 1});
  CHECK(r->rpc_layer() == "grpc");
  CHECK(r->cluster_spec().num_tasks("worker") == 2);
  CHECK(r->cluster_spec().num_tasks("evaluator") == 0);
  CHECK(r->cluster_spec().address({"ps", 0}) == "127.0.0.1:2225");
  CHECK(r->cluster_spec().tasks().size() == 4);
}

TEST_CASE("render and parse round-trip", "[tf_config]") {
  ClusterSpec spec({{"chief", {"127.0.0.1:3000"}}, {"ps", {"127.0.0.1:3001", "[::1]:3002"}}});
  auto r = TFConfigClusterResolver::parse(TFConfigClusterResolver::render(spec, {"ps", 1}));
  REQUIRE(r.ok());
  CHECK(r->task() == TaskId{"ps", 1});
  CHECK(r->cluster_spec().jobs() == spec.jobs());
  auto hp = parse_host_port("[::1]:3002");
  REQUIRE(hp.ok());
  CHECK(hp->host == "::1");
  CHECK(hp->port == 3002);
}

TEST_CASE("Malformed TF_CONFIG is a clear error", "[tf_config]") {
  CHECK_THAT(error_of("{\"cluster\": "), Catch::Contains("not valid JSON"));
  CHECK_THAT(error_of("[1, 2]"), Catch::Contains("JSON object"));
  CHECK_THAT(error_of(R"({"task": {"type": "worker", "index": 0}})"),
             Catch::Contains("no \"cluster\""));
  CHECK_THAT(error_of(R"({"cluster": {"worker": ["127.0.0.1:1"]}})"),
             Catch::Contains("no \"task\""));
  CHECK_THAT(
      error_of(R"({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "ps", "index": 0}})"),
      Catch::Contains("'ps' is not a job"));
  CHECK_THAT(
      error_of(
          R"({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}})"),
      Catch::Contains("index 3 out of range") && Catch::Contains("1 tasks"));
  CHECK_THAT(
      error_of(
          R"({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": "0"}})"),
      Catch::Contains("must be an integer"));
  CHECK_THAT(
      error_of(
          R"({"cluster": {"trainer": ["127.0.0.1:1"]}, "task": {"type": "trainer", "index": 0}})"),
      Catch::Contains("unknown job 'trainer'"));
  CHECK_THAT(
      error_of(
          R"({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:1"]}, "task": {"type": "worker"}})"),
      Catch::Contains("worker:0 ('127.0.0.1:1') and worker:1 ('127.0.0.1:1') are the same"));
  // Compared as addresses, not text: one port given to two tasks is refused however spelt.
  CHECK_THAT(error_of(R"({"cluster": {"worker": ["localhost:7"], "ps": ["127.0.0.1:7"]},
                          "task": {"type": "worker"}})"),
             Catch::Contains("ps:0 ('127.0.0.1:7') and worker:0 ('localhost:7') are the same"));
  CHECK_THAT(error_of(R"({"cluster": {"worker": ["[::1]:7", "[0:0::1]:7"]},
                          "task": {"type": "worker"}})"),
             Catch::Contains("are the same address"));
  CHECK_THAT(error_of(R"({"cluster": {"worker": ["LocalHost:7", "[::1]:7"]},
                          "task": {"type": "worker"}})"),
             Catch::Contains("are the same address"));
  // Distinct loopback addresses, and one host's two ports, are distinct tasks.
  CHECK(TFConfigClusterResolver::parse(
            R"({"cluster": {"worker": ["127.0.0.1:7", "127.0.0.2:7", "localhost:8"]},
                "task": {"type": "worker"}})")
            .ok());
  // Hosts no address can be: a mistyped IPv4 address, a stray newline or space, an empty
  // label, a bad IPv6 address. Refused here, they never make a task listen everywhere.
  CHECK_THAT(error_of(R"({"cluster": {"worker": ["256.1.1.1:7"]}, "task": {"type": "worker"}})"),
             Catch::Contains("host '256.1.1.1' is not an IPv4 address"));
  CHECK_THAT(error_of(R"({"cluster": {"worker": ["1.2.3:7"]}, "task": {"type": "worker"}})"),
             Catch::Contains("not an IPv4 address"));
  CHECK_THAT(
      error_of(R"({"cluster": {"worker": ["worker-0.svc\n:7"]}, "task": {"type": "worker"}})"),
      Catch::Contains("host 'worker-0.svc\\x0a' holds a character"));
  CHECK_THAT(error_of(R"({"cluster": {"worker": ["a b:7"]}, "task": {"type": "worker"}})"),
             Catch::Contains("holds a character"));
  CHECK_THAT(error_of(R"({"cluster": {"worker": ["a..b:7"]}, "task": {"type": "worker"}})"),
             Catch::Contains("empty label"));
  CHECK_THAT(error_of(R"({"cluster": {"worker": ["[::g]:7"]}, "task": {"type": "worker"}})"),
             Catch::Contains("not an IPv6 address"));
  CHECK_THAT(error_of(R"({"cluster": {"worker": ["127.0.0.1"]}, "task": {"type": "worker"}})"),
             Catch::Contains("not host:port"));
  CHECK_THAT(
      error_of(R"({"cluster": {"worker": ["127.0.0.1:70000"]}, "task": {"type": "worker"}})"),
      Catch::Contains("no valid port"));
  CHECK_THAT(error_of(R"({"cluster": {"worker": "127.0.0.1:1"}, "task": {"type": "worker"}})"),
             Catch::Contains("must be a list"));
  CHECK_THAT(
      error_of(
          R"({"cluster": {"chief": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "chief"}})"),
      Catch::Contains("only one"));
}

TEST_CASE("TF_CONFIG that is not UTF-8 is a clear error", "[tf_config]") {
  // A bad byte in a job name, in an address, and a truncated sequence at the end.
  CHECK_THAT(error_of("{\"cluster\": {\"work\xff\": [\"127.0.0.1:1\"]}}"),
             Catch::Contains("TF_CONFIG") && Catch::Contains("not valid UTF-8") &&
                 Catch::Contains("0xff at offset 18"));
  CHECK_THAT(error_of("{\"cluster\": {\"worker\": [\"127.0.0.\xc3\x28:1\"]}}"),
             Catch::Contains("not valid UTF-8"));
  CHECK_THAT(error_of("{\"cluster\": {}} \xe2\x82"), Catch::Contains("not valid UTF-8"));
  // Well-formed UTF-8 in a host name is read (and refused later only as an address).
  CHECK_THAT(error_of("{\"cluster\": {\"worker\": [\"h\xc3\xa9"
                      "te\"]}, \"task\": {\"type\": \"worker\"}}"),
             Catch::Contains("not host:port"));
}

TEST_CASE("TF_CONFIG is read from the environment", "[tf_config]") {
  ::unsetenv("TF_CONFIG");
  CHECK_THAT(TFConfigClusterResolver::from_env().error().message, Catch::Contains("not set"));
  ::setenv("TF_CONFIG",
           R"({"cluster": {"ps": ["127.0.0.1:5000"]}, "task": {"type": "ps", "index": 0}})", 1);
  auto r = TFConfigClusterResolver::from_env();
  ::unsetenv("TF_CONFIG");
  REQUIRE(r.ok());
  CHECK(r->task() == TaskId{"ps", 0});
  CHECK(r->rpc_layer() == "caf");
}

TEST_CASE("TF_CONFIG as Kubeflow's TFJob operator writes it is read", "[tf_config]") {
  auto r = TFConfigClusterResolver::parse(
      R"({"cluster":{"chief":["fmnist-ps-chief-0.default.svc:2222"],)"
      R"("ps":["fmnist-ps-ps-0.default.svc:2222","fmnist-ps-ps-1.default.svc:2222"],)"
      R"("worker":["fmnist-ps-worker-0.default.svc:2222","fmnist-ps-worker-1.default.svc:2222"]},)"
      R"("task":{"type":"ps","index":1},"environment":"cloud"})");
  REQUIRE(r.ok());
  CHECK(r->task() == TaskId{"ps", 1});
  CHECK(r->cluster_spec().address({"ps", 1}) == "fmnist-ps-ps-1.default.svc:2222");
  CHECK(r->cluster_spec().num_tasks("worker") == 2);
  auto hp = troupe::net::parse_host_port(r->cluster_spec().address({"worker", 1}));
  REQUIRE(hp.ok());
  CHECK(hp->host == "fmnist-ps-worker-1.default.svc");
  CHECK(hp->port == 2222);
}

TEST_CASE("A crowded host's tasks tolerate longer silence on their links", "[net][cluster]") {
  auto job_of = [](int workers, const std::string& host) {
    std::vector<std::string> addresses;
    for (int i = 0; i < workers; ++i)
      addresses.push_back(host + ":" + std::to_string(20000 + i));
    return ClusterSpec({{"chief", {"127.0.0.1:19990"}},
                        {"ps", {"127.0.0.1:19991", "127.0.0.1:19992"}},
                        {"worker", addresses}});
  };
  const NodeOptions defaults;
  auto timeout_ms = [&](const ClusterSpec& c, const std::string& host, unsigned cores) {
    return for_job(defaults, c, host, cores).connection_timeout.count();
  };
  // 2 PS x 2 workers and a chief on 2 cores: 2.5 tasks a core, CAF's defaults.
  CHECK(timeout_ms(job_of(2, "127.0.0.1"), "127.0.0.1", 2) == defaults.connection_timeout.count());
  // 131 tasks on 2 cores: 65.5 a core, a second for every 4 of them.
  CHECK(timeout_ms(job_of(128, "127.0.0.1"), "127.0.0.1", 2) == 16375);
  // The same job on 64 cores, or with its workers on another host (a name: nothing is dialled): no
  // longer crowded, and the timeout is that of the job's size (10 heartbeats of 409 ms).
  CHECK(timeout_ms(job_of(128, "127.0.0.1"), "127.0.0.1", 64) == 4090);
  CHECK(timeout_ms(job_of(128, "other-host"), "127.0.0.1", 2) == 4090);
  // At most 30 s, and never below what the options asked for.
  CHECK(timeout_ms(job_of(600, "127.0.0.1"), "127.0.0.1", 2) == 30000);
  NodeOptions patient;
  patient.connection_timeout = std::chrono::seconds(45);
  CHECK(for_job(patient, job_of(600, "127.0.0.1"), "127.0.0.1", 2).connection_timeout.count() ==
        45000);
}

TEST_CASE("Heartbeats are spaced by the job's size and the timeout follows them",
          "[net][cluster]") {
  auto job_of = [](int workers) {
    std::vector<std::string> addresses;
    for (int i = 0; i < workers; ++i)
      addresses.push_back("host-" + std::to_string(i) + ":2222");  // one task a host
    return ClusterSpec({{"chief", {"chief-host:2222"}},
                        {"ps", {"ps-host-0:2222", "ps-host-1:2222"}},
                        {"worker", addresses}});
  };
  const NodeOptions defaults;
  // Up to 32 tasks: 100 ms and 1 s, as CAF is configured by default here.
  auto small = for_job(defaults, job_of(29), "host-0", 2);
  CHECK(small.heartbeat_interval.count() == 100);
  CHECK(small.connection_timeout.count() == 1000);
  // 515 tasks (512 workers) each on a host of its own: 100 ms per 32 tasks, a timeout of
  // 10 intervals; every task derives the same interval, its host unknown or not.
  auto large = for_job(defaults, job_of(512), "host-0", 2);
  CHECK(large.heartbeat_interval.count() == 1609);
  CHECK(large.connection_timeout.count() == 16090);
  CHECK(for_job(defaults, job_of(512), "", 2).heartbeat_interval.count() == 1609);
  // Asked-for settings longer than these stay.
  NodeOptions slow;
  slow.heartbeat_interval = std::chrono::seconds(2);
  slow.connection_timeout = std::chrono::seconds(60);
  auto kept = for_job(slow, job_of(512), "host-0", 2);
  CHECK(kept.heartbeat_interval.count() == 2000);
  CHECK(kept.connection_timeout.count() == 60000);
}
