// The collective interface's choice of implementation: the group's order, the
// `communication` hint, and a clear error when nothing fits.
#include <catch2/catch.hpp>

#include "core/collective/collective.hpp"

using namespace troupe;
using namespace troupe::collective;

namespace {

// Records its calls; enabled for one memory kind.
class Fake final : public Implementation {
 public:
  Fake(Communication kind, Memory memory, int* calls)
      : kind_(kind), memory_(memory), calls_(calls) {}
  Communication kind() const override { return kind_; }
  const char* name() const override { return kind_ == Communication::nccl ? "nccl" : "ring"; }
  bool enabled(const AllReduceOptions& o) const override { return o.memory == memory_; }
  core::Status all_reduce(const AllReduceOptions& o) override {
    ++*calls_;
    for (const auto& b : o.inputs)
      for (size_t i = 0; i < b.count; ++i)
        b.data[i] *= 2.0f;  // stands for a two-rank sum of equal values
    return {};
  }

 private:
  Communication kind_;
  Memory memory_;
  int* calls_;
};

Group make_group(Communication hint, int* nccl_calls, int* ring_calls) {
  std::vector<std::unique_ptr<Implementation>> impls;
  impls.push_back(std::make_unique<Fake>(Communication::nccl, Memory::device, nccl_calls));
  impls.push_back(std::make_unique<Fake>(Communication::ring, Memory::host, ring_calls));
  return Group(0, 2, hint, std::move(impls));
}

}  // namespace

TEST_CASE("auto takes the first implementation enabled for the buffers", "[collective]") {
  int nccl = 0, ring = 0;
  Group g = make_group(Communication::automatic, &nccl, &ring);
  std::vector<float> x{1, 2, 3};
  AllReduceOptions o;
  o.inputs = {{x.data(), x.size()}};
  o.tag = "grads";
  REQUIRE(all_reduce(g, o).ok());
  CHECK(ring == 1);
  CHECK(nccl == 0);
  CHECK(x == std::vector<float>{2, 4, 6});
  o.memory = Memory::device;
  REQUIRE(all_reduce(g, o).ok());
  CHECK(nccl == 1);
}

TEST_CASE("a hint limits the choice to its kind and says what is missing", "[collective]") {
  int nccl = 0, ring = 0;
  std::vector<float> x{1};
  AllReduceOptions o;
  o.inputs = {{x.data(), 1}};
  o.tag = "grads";
  Group g = make_group(Communication::nccl, &nccl, &ring);
  auto chosen = g.choose(o);  // host buffers, NCCL asked for
  REQUIRE_FALSE(chosen);
  CHECK(chosen.error().code == core::Errc::unavailable);
  CHECK_THAT(chosen.error().message, Catch::Contains("'grads'") && Catch::Contains("host") &&
                                         Catch::Contains("communication=nccl") &&
                                         Catch::Contains("nccl is not enabled"));
  CHECK(ring == 0);

  Group ring_only = make_group(Communication::ring, &nccl, &ring);
  o.memory = Memory::device;
  CHECK_FALSE(ring_only.choose(o));
  o.memory = Memory::host;
  REQUIRE(ring_only.choose(o));
  CHECK(std::string((*ring_only.choose(o))->name()) == "ring");

  Group none(0, 1, Communication::nccl, {});
  auto e = none.choose(o);
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error().message, Catch::Contains("none of that kind is built"));
}

TEST_CASE("communication hints parse from text", "[collective]") {
  CHECK(*parse_communication("AUTO") == Communication::automatic);
  CHECK(*parse_communication("ring") == Communication::ring);
  CHECK(*parse_communication("Nccl") == Communication::nccl);
  auto bad = parse_communication("mpi");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("'mpi'"));
  CHECK(std::string(to_string(Communication::nccl)) == "nccl");
}
