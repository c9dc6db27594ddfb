#pragma once

// Keras operations (core/ops) built as a config.json node would make them, for the gradient
// checks of graph_check.hpp: the call's arguments written as JSON, "$0", "$1", ... standing
// for the call's tensors, and a Dense in front of each float input whose kernel starts as
// the identity, so that the operation sees the random batch itself (uniform in
// +-[0.05, 1]) and its input gradient shows in that kernel's.
//
//   GraphCase g;
//   int x = identity_input(g, "x", {3, 4});
//   auto y = call_op(g, "Sum", R"({"axis": [1]})", R"(["$0"])", {x});

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ops/op.hpp"
#include "graph_check.hpp"

namespace troupe::test {

// "$k" strings as Keras's tensor references, everything else as it is; `used` gets k of
// each reference in order (a file references a tensor once per argument that reads it).
inline nlohmann::json with_tensors(const nlohmann::json& v, std::vector<int>& used) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.size() > 1 && s[0] == '$') {
      used.push_back(std::stoi(s.substr(1)));
      return {{"class_name", "__keras_tensor__"},
              {"config", {{"keras_history", {"t", 0, used.back()}}}}};
    }
    return v;
  }
  if (v.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : v)
      out.push_back(with_tensors(e, used));
    return out;
  }
  return v;
}

/// The operation of `cls` with `config` (its name added when missing) called with `args`
/// (a JSON list) and `kwargs` (a JSON object), or the error it gives; `used` gets the k of
/// each "$k", in the order of the call's tensor inputs.
inline core::Expected<std::unique_ptr<core::graph::Operation>> try_op(const std::string& cls,
                                                                      const std::string& config,
                                                                      const std::string& args,
                                                                      const std::string& kwargs,
                                                                      std::vector<int>& used) {
  auto c = nlohmann::json::parse(config);
  if (!c.contains("name")) c["name"] = "op";
  std::vector<nlohmann::json> refs;
  std::vector<core::ops::Arg> parsed;
  for (const auto& a : with_tensors(nlohmann::json::parse(args), used)) {
    auto arg = core::ops::parse_arg(a, refs);
    if (!arg) return arg.error();
    parsed.push_back(std::move(*arg));
  }
  std::map<std::string, core::ops::Arg> kw;
  const auto named = nlohmann::json::parse(kwargs);  // items() of a temporary would dangle
  for (const auto& [k, v] : named.items()) {
    auto arg = core::ops::parse_arg(with_tensors(v, used), refs);
    if (!arg) return arg.error();
    kw[k] = std::move(*arg);
  }
  return core::ops::make_op(cls, c, std::move(parsed), std::move(kw));
}

// The graph's tensors a call reads: inputs[k] for each reference "$k".
inline std::vector<int> call_inputs(const std::vector<int>& used, const std::vector<int>& inputs) {
  std::vector<int> ids;
  for (int k : used)
    ids.push_back(inputs.at(static_cast<size_t>(k)));
  return ids;
}

/// Calls a new operation on `inputs`; the test fails where it cannot be made or called.
inline std::vector<int> call_op(GraphCase& g, const std::string& cls, const std::string& config,
                                const std::string& args, const std::vector<int>& inputs,
                                const std::string& kwargs = "{}") {
  std::vector<int> used;
  auto op = try_op(cls, config, args, kwargs, used);
  INFO(cls << ": " << (op ? std::string() : op.error().message));
  REQUIRE(op.ok());
  auto out = g.graph.call(std::shared_ptr<core::graph::Operation>(std::move(*op)),
                          call_inputs(used, inputs));
  INFO(cls << ": " << (out ? std::string() : out.error().message));
  REQUIRE(out.ok());
  return *out;
}

/// The error a graph gives calling the operation (or making it).
inline std::string op_error(GraphCase& g, const std::string& cls, const std::string& config,
                            const std::string& args, const std::vector<int>& inputs,
                            const std::string& kwargs = "{}") {
  std::vector<int> used;
  auto op = try_op(cls, config, args, kwargs, used);
  if (!op) return op.error().message;
  auto out = g.graph.call(std::shared_ptr<core::graph::Operation>(std::move(*op)),
                          call_inputs(used, inputs));
  return out ? std::string() : out.error().message;
}

/// A float input of per-example `shape` seen through a Dense whose kernel is the identity:
/// the tensor the operations read.
inline int identity_input(GraphCase& g, const std::string& name, std::vector<int64_t> shape) {
  const int x = g.graph.add_input(name, {core::ColumnKind::floats, shape});
  const int y = with_dense_in_front(g, x, name + "_front");
  const int64_t n = shape.back();
  std::vector<float> eye(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    eye[static_cast<size_t>(i * n + i)] = 1.0f;
  set_weight(g.graph, name + "_front/kernel", eye);
  return y;
}

}  // namespace troupe::test
