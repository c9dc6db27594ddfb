#pragma once

// Where a process computes, chosen once from its --device and --precision values:
//
//   auto device = troupe::select_device("cuda");        // this worker's GPU (local rank)
//   if (!device) return fail(device.error());           // names the device and what was seen
//   auto precision = troupe::select_precision("auto", *device);
//   model->to(*device, *precision);
//
// "cuda" takes GPU local_rank() modulo the GPUs this process sees (CUDA_VISIBLE_DEVICES
// applies), so the workers of one host spread over its GPUs; "cuda:N" takes that one.

#include <string>

#include "core/backend.hpp"
#include "core/device.hpp"
#include "core/expected.hpp"

namespace troupe {

/// This process's rank among the processes of its host: TROUPE_LOCAL_RANK, or what a
/// launcher says (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK), or else its place
/// among TF_CONFIG's chief and worker tasks on its host; 0 alone. A variable that is set
/// but not a rank is an error naming it.
core::Expected<int> local_rank();

/// The device for a --device value (cpu, cuda, cuda:N), with local_rank() for "cuda".
core::Expected<core::Device> select_device(const std::string& request);
core::Expected<core::Device> select_device(const std::string& request, int local_rank);

/// The policy for a --precision value on `device`: float32, tf32, mixed_bfloat16,
/// mixed_float16, or auto (mixed_bfloat16 where the device has fast bf16 products, else
/// float32). tf32 is a GPU mode: an error on the CPU.
core::Expected<core::Precision> select_precision(const std::string& request, core::Device device);

/// The device's name for reports: "cpu (avx2, avx512f, ...; 1 intra-op threads)",
/// "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB, driver 13.0, runtime 13.0)".
std::string device_name(core::Device device);

}  // namespace troupe
