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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/cpu_features.hpp"
#include "core/loss_scale.hpp"
#include "core/parameter.hpp"
#include "net/wire_dtype.hpp"
#include "troupe/devices.hpp"
#include "troupe/model.hpp"
#include "troupe/strategy.hpp"

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
    auto backend = core::backend_for(*d);
    if (d->is_cpu() && backend && !(*backend)->fast(*p))
      std::cerr << program << ": " << core::precision_name(*p)
                << " on this CPU rounds the matrix products' operands as a reference: slower "
                   "than float32, not faster"
                << std::endl;
    return DeviceChoice{*d, *p, device_name(*d)};
  }
};

/// --wire-dtype, the same wherever tensors travel between tasks: pulled values and pushed
/// gradients on the tensor channel (PS jobs), the gradients' all-reduce (mirrored jobs).
struct WireFlag {
  std::string value = "float32";

  void add(CLI::App& app) {
    app.add_option("--wire-dtype", value,
                   "the type tensors travel in between tasks (pulled values and pushed "
                   "gradients; all-reduced gradients): float32, or bf16 (half the bytes, values "
                   "rounded; variables stay float32)");
  }
  /// The parsed type; an error names the value.
  core::Expected<net::WireDtype> parse() const { return net::parse_wire_dtype(value); }
};

/// The requests that came as bf16 to every PS task of `strategy`, summed (what
/// --wire-dtype bf16 sent); null when a task does not answer.
inline nlohmann::json ps_bf16_requests(ParameterServerStrategy& strategy) {
  auto stats = strategy.ps_stats();
  if (!stats) return nullptr;
  int64_t sum = 0;
  for (const auto& p : *stats)
    sum += p.bf16_requests;
  return sum;
}

/// A parameter-server worker's side of a model on a device: the device is chosen at the
/// worker's first step (the PS tasks and the chief run the same program and take no GPU),
/// pulled values go to the device, gradients come back to the host to be pushed, and under
/// mixed_float16 a step whose gradients overflow pushes nothing.
class WorkerDevice {
 public:
  /// Chooses the device once and moves the model there with `move(device, precision)`.
  template <class Move>
  core::Status place(const DeviceFlags& flags, const std::string& program, Move move) {
    if (choice_) return {};
    auto c = flags.choose(program);
    if (!c) return c.error();
    if (auto st = move(c->device, c->precision); !st) return st;
    if (core::needs_loss_scale(c->precision)) scale_.emplace();
    choice_ = *c;
    return {};
  }
  core::Device device() const { return choice_ ? choice_->device : core::Device::cpu(); }
  float grad_scale() const { return scale_ ? scale_->scale() : 1.0f; }
  /// Under loss scaling: whether the gradients are finite (then unscaled in place) or the
  /// step pushes nothing; true otherwise.
  bool finish_scaled_step(const std::vector<core::TensorView>& grads) {
    if (!scale_) return true;
    auto backend = core::backend_for(device());
    return backend && core::unscale_gradients(*scale_, **backend, grads);
  }
  /// The parameters' gradients on the host, named, ready to push.
  std::vector<std::pair<std::string, core::ConstTensorView>> host_grads(
      const std::vector<core::Parameter>& params) {
    staging_.resize(params.size());
    std::vector<std::pair<std::string, core::ConstTensorView>> out;
    for (size_t i = 0; i < params.size(); ++i)
      out.emplace_back(params[i].name, core::on(core::Device::cpu(), *params[i].grad, staging_[i]));
    return out;
  }

 private:
  std::optional<DeviceChoice> choice_;
  std::optional<core::LossScale> scale_;
  std::vector<core::Tensor> staging_;
};

/// Checks a --device and --precision value's spelling where the device is not chosen (the
/// chief of a PS job): an error names the value.
inline core::Status check_spelling(const DeviceFlags& flags) {
  if (auto d = core::parse_device(flags.device); !d) return d.error();
  if (flags.precision != "auto")
    if (auto p = core::parse_precision(flags.precision); !p) return p.error();
  return {};
}

/// What the CPU offered the kernels (after TROUPE_CPU_DISABLE's mask).
inline void report_cpu(nlohmann::json& j) {
  j["cpu_features"] = core::cpu_feature_names();
}

/// The device's part of a program's final JSON line, for a troupe::Model's replica.
inline void report_device(nlohmann::json& j, const Model& model) {
  report_cpu(j);
  j["device"] = model.device().to_string();
  j["device_name"] = device_name(model.device());
  j["precision"] = core::precision_name(model.precision());
  j["loss_scale"] = model.loss_scale() != nullptr ? model.loss_scale()->scale() : 1.0;
  j["skipped_steps"] = model.loss_scale() != nullptr ? model.loss_scale()->skipped_steps() : 0;
}

/// The device's part of a program's final JSON line.
inline void report(nlohmann::json& j, const DeviceChoice& c, const core::LossScale* loss_scale) {
  report_cpu(j);
  j["device"] = c.device.to_string();
  j["device_name"] = c.name;
  j["precision"] = core::precision_name(c.precision);
  j["loss_scale"] = loss_scale != nullptr ? loss_scale->scale() : 1.0;
  j["skipped_steps"] = loss_scale != nullptr ? loss_scale->skipped_steps() : 0;
}

}  // namespace troupe::examples
