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
  using DatasetFn = std::function<core::Dataset<core::Batch>(const core::InputContext&)>;

  /// Registers `fn(StepContext&, Args...) -> R` (R may be void or core::Expected<T>).
  template <class F>
  void add_step(const std::string& name, F fn) {
    add_typed(name, std::function(std::move(fn)));
  }
  void add_dataset(const std::string& name, DatasetFn fn) { datasets_[name] = std::move(fn); }

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

}  // namespace troupe
