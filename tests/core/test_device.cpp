// Devices, element types and precision policies as values; how a process picks its device;
// tensors that live on a device other than the CPU (the fake one of fake_device.hpp).
#include <catch2/catch.hpp>

#include "core/backend.hpp"
#include "core/device.hpp"
#include "core/tensor.hpp"
#include "fake_device.hpp"
#include "helpers.hpp"

using namespace troupe::core;
using troupe::test::Env;
using troupe::test::FakeCuda;

namespace {

// No CUDA provider for a scope (core_tests links none; a test's FakeCuda may have been).
struct NoCuda {
  NoCuda() : previous(device_provider(DeviceKind::cuda)) {
    register_device_provider(DeviceKind::cuda, nullptr);
  }
  ~NoCuda() { register_device_provider(DeviceKind::cuda, previous); }
  DeviceProvider* previous;
};

}  // namespace

TEST_CASE("device names parse to devices and print back", "[device]") {
  CHECK(parse_device("cpu")->kind == DeviceKind::cpu);
  auto any = parse_device("cuda");
  REQUIRE(any.ok());
  CHECK((any->kind == DeviceKind::cuda && any->index == -1));
  CHECK(any->to_string() == "cuda");
  auto third = parse_device("CUDA:3");
  REQUIRE(third.ok());
  CHECK((third->kind == DeviceKind::cuda && third->index == 3));
  CHECK(third->to_string() == "cuda:3");
  CHECK(parse_device("gpu:1")->index == 1);
  CHECK(Device::cuda(2).to_string() == "cuda:2");
  CHECK(Device::cpu().to_string() == "cpu");
  CHECK(Device::cuda(1) != Device::cuda(2));
  for (const char* bad : {"", "cuda:", "cuda:x", "cuda:-1", "cuda:12345", "tpu", "cuda0"}) {
    auto e = parse_device(bad);
    INFO(bad);
    REQUIRE_FALSE(e.ok());
    CHECK(e.error().code == Errc::invalid_argument);
    CHECK_THAT(e.error().message, Catch::Contains(std::string("'") + bad + "'"));
  }
}

TEST_CASE("element types and precision policies have names, sizes and compute types", "[device]") {
  CHECK(dtype_size(DType::float32) == 4);
  CHECK(dtype_size(DType::bfloat16) == 2);
  CHECK(dtype_size(DType::float16) == 2);
  CHECK(dtype_size(DType::int64) == 8);
  for (DType t : {DType::float32, DType::bfloat16, DType::float16, DType::int32, DType::int64})
    CHECK(parse_dtype(dtype_name(t)).value() == t);
  CHECK(parse_dtype("bf16").value() == DType::bfloat16);
  CHECK_FALSE(parse_dtype("float8").ok());

  for (Precision p :
       {Precision::float32, Precision::tf32, Precision::mixed_bfloat16, Precision::mixed_float16})
    CHECK(parse_precision(precision_name(p)).value() == p);
  CHECK(compute_dtype(Precision::mixed_bfloat16) == DType::bfloat16);
  CHECK(compute_dtype(Precision::mixed_float16) == DType::float16);
  CHECK(compute_dtype(Precision::tf32) == DType::float32);
  CHECK(needs_loss_scale(Precision::mixed_float16));
  CHECK_FALSE(needs_loss_scale(Precision::mixed_bfloat16));
  auto bad = parse_precision("mixed_int8");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("'mixed_int8'") && Catch::Contains("auto"));
  // auto: bf16 where the backend has fast bf16 products (test_cpu_kernels.cpp: the CPU's).
  CHECK(resolve_precision("auto", cpu_backend()).value() ==
        (cpu_backend().fast(Precision::mixed_bfloat16) ? Precision::mixed_bfloat16
                                                       : Precision::float32));
  CHECK(resolve_precision("mixed_float16", cpu_backend()).value() == Precision::mixed_float16);
}

TEST_CASE("a process without a CUDA backend says so when asked for a GPU", "[device]") {
  NoCuda none;
  CHECK(select_device(parse_device("cpu").value(), 0).value() == Device::cpu());
  auto e = select_device(parse_device("cuda:0").value(), 0);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().code == Errc::invalid_argument);
  CHECK_THAT(e.error().message, Catch::Contains("cuda:0") && Catch::Contains("CUDA"));
  auto b = backend_for(Device::cuda(0));
  REQUIRE_FALSE(b.ok());
  CHECK_THAT(b.error().message, Catch::Contains("device cuda:0"));
  CHECK(backend_for(Device::cpu()).value() == &cpu_backend());
}

TEST_CASE("cuda takes the GPU of the local rank, cuda:N that one, and a missing one is named",
          "[device]") {
  FakeCuda fake(2);
  CHECK(select_device(parse_device("cuda").value(), 0).value() == Device::cuda(0));
  CHECK(select_device(parse_device("cuda").value(), 1).value() == Device::cuda(1));
  CHECK(select_device(parse_device("cuda").value(), 3).value() == Device::cuda(1));
  CHECK(select_device(parse_device("cuda:1").value(), 0).value() == Device::cuda(1));
  Env visible("CUDA_VISIBLE_DEVICES", "4,5");
  auto e = select_device(parse_device("cuda:2").value(), 0);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().code == Errc::invalid_argument);
  CHECK_THAT(e.error().message, Catch::Contains("cuda:2") &&
                                    Catch::Contains("2 fake CUDA devices") &&
                                    Catch::Contains("CUDA_VISIBLE_DEVICES=4,5"));
  FakeCuda none(0);
  auto z = select_device(parse_device("cuda").value(), 0);
  REQUIRE_FALSE(z.ok());
  CHECK_THAT(z.error().message, Catch::Contains("no fake CUDA device"));
}

TEST_CASE("a tensor on a device is made, filled, copied and read back through its backend",
          "[device]") {
  FakeCuda fake(1);
  auto& be = fake.fake(0);
  {
    const Tensor host(Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
    Tensor d = host.to(Device::cuda(0));
    CHECK(d.device() == Device::cuda(0));
    CHECK(d.dtype() == DType::float32);
    CHECK(d.view().device() == Device::cuda(0));
    CHECK(be.transfers == 1);
    const Tensor back = d.to(Device::cpu());
    CHECK(back.device().is_cpu());
    CHECK(max_abs_diff(back, host) == 0.0f);

    Tensor copy_on_device = d;  // deep, on the device
    CHECK(copy_on_device.device() == Device::cuda(0));
    CHECK(copy_on_device.data() != d.data());
    d.fill(7.0f);
    CHECK(copy_on_device.to(Device::cpu())[5] == 6.0f);
    CHECK(d.to(Device::cpu())[5] == 7.0f);

    // A row range of a device view stays on the device, at the right byte offset.
    Tensor halves(Shape{4, 2}, DType::bfloat16, Device::cuda(0));
    auto rows = halves.view().rows(2, 4);
    CHECK(rows.device() == Device::cuda(0));
    CHECK(rows.dtype() == DType::bfloat16);
    CHECK(reinterpret_cast<const char*>(rows.data()) -
              reinterpret_cast<const char*>(halves.data()) ==
          2 * 2 * 2);

    // Growing within the allocation reuses it; a copy into a host view arrives.
    const auto before = be.allocations.load();
    d.resize(Shape{3});
    d.resize(Shape{2, 3});
    CHECK(be.allocations == before);
    std::vector<float> out(6, -1.0f);
    copy(copy_on_device, TensorView(out.data(), Shape{2, 3}));
    CHECK(out[0] == 1.0f);
    CHECK(out[5] == 6.0f);
  }
}
