#pragma once

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/data/dataset.hpp"
#include "core/data/input_context.hpp"
#include "core/runtime/codec.hpp"
#include "core/runtime/step_context.hpp"

namespace troupe {

template <class T>
struct is_expected : std::false_type {};
template <class T>
struct is_expected<core::Expected<T>> : std::true_type {};

/// Step functions and dataset functions by name. Every process of a job builds the same
/// registry (the same binary runs every role), so a closure names its step and each node
/// finds the code locally; code never travels.
///
///   Registry reg;
///   reg.add_step("add", [](StepContext&, int a, int b) { return a + b; });
///   reg.add_dataset("train", [](const core::InputContext& ctx) { return make_ds(ctx); });
class Registry {
 public:
  using Step =
      std::function<core::Expected<std::vector<char>>(StepContext&, const std::vector<char>&)>;
  /// A dataset function: a worker's input context, and the arguments the dataset's
  /// creation carried (ClusterCoordinator::create_per_worker_dataset; empty for
  /// add_dataset's functions).
  using DatasetFn = std::function<core::Dataset<core::Batch>(const core::InputContext&,
                                                             const std::vector<char>&)>;

  /// Registers `fn(StepContext&, Args...) -> R` (R may be void or core::Expected<T>).
  template <class F>
  void add_step(const std::string& name, F fn) {
    add_typed(name, std::function(std::move(fn)));
  }
  void add_dataset(const std::string& name,
                   std::function<core::Dataset<core::Batch>(const core::InputContext&)> fn) {
    datasets_[name] = [fn = std::move(fn)](const core::InputContext& ctx,
                                           const std::vector<char>&) { return fn(ctx); };
  }
  /// A dataset function that takes its arguments from the chief (a model and the
  /// description of its data travel to every worker this way, and again to a worker that
  /// rejoins).
  void add_dataset_with_args(const std::string& name, DatasetFn fn) {
    datasets_[name] = std::move(fn);
  }

  const Step* step(const std::string& name) const {
    auto it = steps_.find(name);
    return it == steps_.end() ? nullptr : &it->second;
  }
  const DatasetFn* dataset(const std::string& name) const {
    auto it = datasets_.find(name);
    return it == datasets_.end() ? nullptr : &it->second;
  }

 private:
  template <class R, class... A>
  void add_typed(const std::string& name, std::function<R(StepContext&, A...)> fn) {
    steps_[name] = [fn = std::move(fn), name](
                       StepContext& ctx,
                       const std::vector<char>& bytes) -> core::Expected<std::vector<char>> {
      auto args = decode<std::tuple<std::decay_t<A>...>>(bytes);
      if (!args)
        return core::make_error(core::Errc::invalid_argument,
                                "step '" + name + "': " + args.error().message);
      auto call = [&](auto&&... xs) -> decltype(auto) {
        return fn(ctx, std::forward<decltype(xs)>(xs)...);
      };
      if constexpr (std::is_void_v<R>) {
        std::apply(call, std::move(*args));
        return encode_value(msgpack::type::nil_t{});
      } else if constexpr (is_expected<R>::value) {
        R r = std::apply(call, std::move(*args));
        if (!r) return r.error();
        return encode_value(*r);
      } else {
        return encode_value(std::apply(call, std::move(*args)));
      }
    };
  }

  std::map<std::string, Step> steps_;
  std::map<std::string, DatasetFn> datasets_;
};

/// What a per-worker dataset's creation carries to each worker: its name and its arguments
/// in one string, which the chief records and replays to a worker that rejoins without
/// reading it (the name alone without arguments; else the name, a unit separator 0x1f, and
/// the argument bytes). Steps name the dataset by its name alone.
inline constexpr char dataset_args_separator = '\x1f';
inline std::string dataset_request(const std::string& name, const std::vector<char>& args) {
  if (args.empty()) return name;
  std::string r = name;
  r.push_back(dataset_args_separator);
  r.append(args.begin(), args.end());
  return r;
}
/// The name of a request and its arguments.
inline std::pair<std::string, std::vector<char>> split_dataset_request(const std::string& request) {
  const auto at = request.find(dataset_args_separator);
  if (at == std::string::npos) return {request, {}};
  return {request.substr(0, at),
          std::vector<char>(request.begin() + static_cast<std::ptrdiff_t>(at) + 1, request.end())};
}

}  // namespace troupe
