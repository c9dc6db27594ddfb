// Every Keras operation Troupe has, by the class name Keras records in config.json (the one
// list of them). Several classes share a factory that tells them apart by name.

#include <algorithm>

#include "core/graph/json_guard.hpp"
#include "core/ops/op.hpp"

namespace troupe::core::ops {

// The factories (core/ops/<family>.cpp).
Expected<std::unique_ptr<graph::Operation>> make_elementwise(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_clip(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_map(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_reduction(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_view(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_transpose(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_replicate(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_join(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_part(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_get_item(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_slice(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_take(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_matmul(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_einsum(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_cast(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_one_hot(OpConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_axes(OpConfig& c);  // axes.cpp

namespace {

struct OpEntry {
  const char* class_name;
  OpFactory make;
  /// Whether, with this config, its inputs are integer ids (a float Input feeding it is
  /// read as ids, as Keras casts); null: never.
  bool (*reads_ids)(const nlohmann::json& config) = nullptr;
};

// cast to an integer type: ids, as the model's inputs give them.
bool casts_to_ints(const nlohmann::json& config) {
  const auto& t = graph::member(config, "dtype");
  return t.is_string() && t.get<std::string>().find("int") != std::string::npos;
}

constexpr OpEntry kOps[] = {
    // arithmetic, comparisons, logic (elementwise.cpp)
    {"Add", make_elementwise},
    {"Subtract", make_elementwise},
    {"Multiply", make_elementwise},
    {"Divide", make_elementwise},
    {"TrueDivide", make_elementwise},
    {"Power", make_elementwise},
    {"Maximum", make_elementwise},
    {"Minimum", make_elementwise},
    {"Where", make_elementwise},
    {"Greater", make_elementwise},
    {"GreaterEqual", make_elementwise},
    {"Less", make_elementwise},
    {"LessEqual", make_elementwise},
    {"Equal", make_elementwise},
    {"NotEqual", make_elementwise},
    {"LogicalAnd", make_elementwise},
    {"LogicalOr", make_elementwise},
    {"LogicalXor", make_elementwise},
    {"Clip", make_clip},
    // functions of one tensor (map.cpp)
    {"Negative", make_map},
    {"Exp", make_map},
    {"Log", make_map},
    {"Log1p", make_map},
    {"Sqrt", make_map},
    {"Square", make_map},
    {"Absolute", make_map},
    {"Abs", make_map},
    {"Sign", make_map},
    {"Tanh", make_map},
    {"Sigmoid", make_map},
    {"Relu", make_map},
    {"Erf", make_map},
    {"LogSigmoid", make_map},
    {"Softplus", make_map},
    {"Silu", make_map},
    {"Swish", make_map},
    {"Selu", make_map},
    {"Elu", make_map},
    {"LeakyRelu", make_map},
    {"Gelu", make_map},
    {"Reciprocal", make_map},
    {"LogicalNot", make_map},
    {"Softmax", make_map},
    {"LogSoftmax", make_map},
    // reductions (reduce.cpp)
    {"Sum", make_reduction},
    {"Mean", make_reduction},
    {"Max", make_reduction},
    {"Amax", make_reduction},
    {"Min", make_reduction},
    {"Amin", make_reduction},
    {"Prod", make_reduction},
    {"Argmax", make_reduction},
    {"Argmin", make_reduction},
    // shapes (shape.cpp)
    {"ExpandDims", make_view},
    {"Squeeze", make_view},
    {"Reshape", make_view},
    {"Transpose", make_transpose},
    {"Swapaxes", make_axes},
    {"Moveaxis", make_axes},
    {"BroadcastTo", make_replicate},
    {"Tile", make_replicate},
    {"Repeat", make_replicate},
    // joining and splitting (join.cpp)
    {"Concatenate", make_join},
    {"Stack", make_join},
    {"Split", make_part},
    {"Unstack", make_part},
    // indexing (index.cpp)
    {"GetItem", make_get_item},
    {"Slice", make_slice},
    {"Take", make_take},
    // products (matmul.cpp)
    {"Matmul", make_matmul},
    {"Einsum", make_einsum},
    // types (cast.cpp)
    {"Cast", make_cast, casts_to_ints},
    {"OneHot", make_one_hot},
};

}  // namespace

bool is_op_module(const std::string& module) {
  return module.rfind("keras.src.ops", 0) == 0 || module.rfind("keras.ops", 0) == 0;
}

Expected<std::unique_ptr<graph::Operation>> make_op(const std::string& class_name,
                                                    const nlohmann::json& config,
                                                    std::vector<Arg> args,
                                                    std::map<std::string, Arg> kwargs) {
  return graph::guard_json(
      "operation config", [&]() -> Expected<std::unique_ptr<graph::Operation>> {
        for (const auto& e : kOps)
          if (class_name == e.class_name) {
            OpConfig c(class_name, config, std::move(args), std::move(kwargs));
            return e.make(c);
          }
        const std::string name = config.is_object() ? config.value("name", std::string()) : "";
        std::string known;
        for (const auto& k : op_classes())
          known += (known.empty() ? "" : ", ") + k;
        return make_error(Errc::invalid_argument,
                          "operation '" + name + "' (" + class_name +
                              "): Troupe has no operation of this class (it "
                              "has " +
                              known + ")");
      });
}

bool op_reads_ids(const std::string& class_name, const nlohmann::json& config) {
  for (const auto& e : kOps)
    if (class_name == e.class_name) return e.reads_ids != nullptr && e.reads_ids(config);
  return false;
}

std::vector<std::string> op_classes() {
  std::vector<std::string> out;
  for (const auto& e : kOps)
    out.emplace_back(e.class_name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace troupe::core::ops
