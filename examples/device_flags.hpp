#pragma once

// --device and --precision, the same in every example, and what the final JSON line says
// about them (device, device_name, precision, loss_scale, skipped_steps).
//
//   examples::DeviceFlags flags;
//   flags.add(app);
//   ...
//   auto choice = flags.choose("fmnist_local");   // an error names the device and what was seen
//   model->to(choice->device, choice->precision);

#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/loss_scale.hpp"
#include "troupe/devices.hpp"

namespace troupe::examples {

struct DeviceChoice {
  core::Device device;
  core::Precision precision = core::Precision::float32;
  std::string name;
};

struct DeviceFlags {
  std::string device = "cpu";
  std::string precision = "float32";

  void add(CLI::App& app) {
    app.add_option("--device", device,
                   "cpu, cuda (this worker's GPU, by its local rank) or cuda:N");
    app.add_option("--precision", precision,
                   "float32, tf32 (GPU), mixed_bfloat16, mixed_float16 (loss scaling) or auto");
  }

  core::Expected<DeviceChoice> choose(const std::string& program) const {
    auto d = select_device(device);
    if (!d) return d.error();
    auto p = select_precision(precision, *d);
    if (!p) return p.error();
    if (d->is_cpu() && *p != core::Precision::float32)
      std::cerr << program << ": " << core::precision_name(*p)
                << " on the CPU rounds the matrix products' operands as a reference: slower "
                   "than float32, not faster"
                << std::endl;
    return DeviceChoice{*d, *p, device_name(*d)};
  }
};

/// The device's part of a program's final JSON line.
inline void report(nlohmann::json& j, const DeviceChoice& c, const core::LossScale* loss_scale) {
  j["device"] = c.device.to_string();
  j["device_name"] = c.name;
  j["precision"] = core::precision_name(c.precision);
  j["loss_scale"] = loss_scale != nullptr ? loss_scale->scale() : 1.0;
  j["skipped_steps"] = loss_scale != nullptr ? loss_scale->skipped_steps() : 0;
}

}  // namespace troupe::examples
