// How a process picks its device and precision: its local rank from a launcher's variables
// or from TF_CONFIG's tasks on its host, and the errors a bad value or a missing GPU give.
#include <catch2/catch.hpp>

#include "core/backend.hpp"
#include "helpers.hpp"
#include "net/cluster_spec.hpp"
#include "troupe/devices.hpp"

using namespace troupe;
using troupe::test::Env;

namespace {

// A cluster of two hosts: the chief and two workers on loopback (spelt three ways), two
// workers on host-b (names only: nothing connects to them).
const char* two_hosts(int worker) {
  static std::string text;
  text = R"({"cluster": {"chief": ["localhost:4000"],
                         "worker": ["127.0.0.1:4001", "host-b:4000", "[::1]:4002", "host-b:4001"],
                         "ps": ["127.0.0.1:4003"]},
             "task": {"type": "worker", "index": )" +
         std::to_string(worker) + "}}";
  return text.c_str();
}

}  // namespace

TEST_CASE("the local rank counts the compute tasks of the same host", "[devices]") {
  const net::ClusterSpec spec(
      {{"chief", {"localhost:4000"}},
       {"worker", {"127.0.0.1:4001", "host-b:4000", "[::1]:4002", "host-b:4001"}},
       {"ps", {"127.0.0.1:4003"}}});
  CHECK(net::local_rank(spec, {"chief", 0}) == 0);
  CHECK(net::local_rank(spec, {"worker", 0}) == 1);
  CHECK(net::local_rank(spec, {"worker", 1}) == 0);
  CHECK(net::local_rank(spec, {"worker", 2}) == 2);
  CHECK(net::local_rank(spec, {"worker", 3}) == 1);
  CHECK(net::local_rank(spec, {"ps", 0}) == -1);
}

TEST_CASE("a launcher's local rank wins over TF_CONFIG's, and a bad one is named", "[devices]") {
  Env a("TROUPE_LOCAL_RANK", nullptr), b("OMPI_COMM_WORLD_LOCAL_RANK", nullptr),
      c("SLURM_LOCALID", nullptr), d("LOCAL_RANK", nullptr);
  {
    Env tf("TF_CONFIG", two_hosts(2));
    CHECK(local_rank().value() == 2);
    Env slurm("SLURM_LOCALID", "3");
    CHECK(local_rank().value() == 3);
    Env ours("TROUPE_LOCAL_RANK", "1");
    CHECK(local_rank().value() == 1);
  }
  {
    Env tf("TF_CONFIG", nullptr);
    CHECK(local_rank().value() == 0);
    for (const char* bad : {"", "x", "-1", "2x"}) {
      Env ours("TROUPE_LOCAL_RANK", bad);
      auto r = local_rank();
      REQUIRE_FALSE(r.ok());
      CHECK_THAT(r.error().message,
                 Catch::Contains("TROUPE_LOCAL_RANK='" + std::string(bad) + "'"));
    }
  }
}

TEST_CASE("the CPU is always there and a GPU this process lacks is refused naming it",
          "[devices]") {
  auto cpu = select_device("cpu");
  REQUIRE(cpu.ok());
  CHECK(cpu->is_cpu());
  CHECK_THAT(device_name(*cpu), Catch::StartsWith("cpu ("));
  CHECK(select_precision("float32", *cpu).value() == core::Precision::float32);
  CHECK(select_precision("auto", *cpu).value() ==
        (core::cpu_backend().fast(core::Precision::mixed_bfloat16) ? core::Precision::mixed_bfloat16
                                                                   : core::Precision::float32));
  CHECK(select_precision("mixed_float16", *cpu).value() == core::Precision::mixed_float16);
  auto tf32 = select_precision("tf32", *cpu);
  REQUIRE_FALSE(tf32.ok());
  CHECK_THAT(tf32.error().message, Catch::Contains("tf32") && Catch::Contains("GPU"));
  auto unknown = select_device("tpu:0");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().message, Catch::Contains("'tpu:0'"));

  auto gpu = select_device("cuda:0");
  if (gpu.ok()) {
    WARN("this machine has a GPU: the refusal is not exercised");
    return;
  }
  CHECK(gpu.error().code == core::Errc::invalid_argument);
  CHECK_THAT(gpu.error().message, Catch::Contains("device cuda:0"));
  // What the process saw: no GPU (CUDA built), or no CUDA at all.
  CHECK_THAT(gpu.error().message,
             Catch::Contains("no CUDA device") || Catch::Contains("built without CUDA"));
#ifdef TROUPE_TEST_GPU_MODULE
  // The answer came from the CUDA module, loaded for the question (CUDA's runtime with it).
  CHECK(test::mapped_files_with(getpid(), {"libtroupe_gpu.so"}).size() == 1);
  CHECK_FALSE(test::mapped_files_with(getpid(), {"libcudart"}).empty());
#endif
}
