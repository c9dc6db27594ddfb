#include "core/layer_ops.hpp"

#include <utility>

namespace troupe::core {

namespace {

// Keras's names, the first of each function being the one it writes back.
constexpr std::pair<const char*, ActFn> kActivations[] = {
    {"linear", ActFn::linear},
    {"relu", ActFn::relu},
    {"sigmoid", ActFn::sigmoid},
    {"tanh", ActFn::tanh},
    {"softmax", ActFn::softmax},
    {"gelu", ActFn::gelu},
    {"silu", ActFn::silu},
    {"swish", ActFn::silu},
    {"softplus", ActFn::softplus},
    {"elu", ActFn::elu},
    {"selu", ActFn::selu},
    {"leaky_relu", ActFn::leaky_relu},
    {"exponential", ActFn::exponential},
};

// The element-wise maps that are Keras operations only (keras.ops), by their names there.
constexpr std::pair<const char*, ActFn> kMaps[] = {
    {"log_softmax", ActFn::log_softmax},
    {"negative", ActFn::negative},
    {"log", ActFn::log},
    {"log1p", ActFn::log1p},
    {"sqrt", ActFn::sqrt},
    {"square", ActFn::square},
    {"absolute", ActFn::abs},
    {"sign", ActFn::sign},
    {"erf", ActFn::erf},
    {"log_sigmoid", ActFn::log_sigmoid},
    {"logical_not", ActFn::logical_not},
    {"reciprocal", ActFn::reciprocal},
};

constexpr const char* kElementOps[] = {
    "add",     "subtract",  "multiply",    "divide",        "power",       "maximum",
    "minimum", "where",     "greater",     "greater_equal", "less",        "less_equal",
    "equal",   "not_equal", "logical_and", "logical_or",    "logical_xor",
};
static_assert(sizeof(kElementOps) / sizeof(kElementOps[0]) ==
                  static_cast<size_t>(ElementOp::logical_xor) + 1,
              "kElementOps follows ElementOp");

}  // namespace

const char* act_fn_name(ActFn f) {
  if (f == ActFn::gelu_tanh) return "gelu";
  for (const auto& [name, fn] : kActivations)
    if (fn == f) return name;
  for (const auto& [name, fn] : kMaps)
    if (fn == f) return name;
  return "?";
}

Expected<ActFn> parse_act_fn(const std::string& name) {
  for (const auto& [n, fn] : kActivations)
    if (name == n) return fn;
  std::string known;
  for (const auto& [n, fn] : kActivations)
    known += std::string(known.empty() ? "" : ", ") + n;
  return make_error(Errc::invalid_argument,
                    "activation '" + name + "' is not supported (Troupe has " + known + ")");
}

bool act_fn_uses_output(ActFn f) {
  switch (f) {
    case ActFn::relu:
    case ActFn::sigmoid:
    case ActFn::tanh:
    case ActFn::softmax:
    case ActFn::exponential:
    case ActFn::log_softmax:
    case ActFn::sqrt:
    case ActFn::reciprocal:
      return true;
    default:
      return false;
  }
}

int element_op_operands(ElementOp op) {
  return op == ElementOp::select ? 3 : 2;
}

bool element_op_differentiable(ElementOp op) {
  switch (op) {
    case ElementOp::add:
    case ElementOp::subtract:
    case ElementOp::multiply:
    case ElementOp::divide:
    case ElementOp::power:
    case ElementOp::maximum:
    case ElementOp::minimum:
    case ElementOp::select:
      return true;
    default:
      return false;
  }
}

const char* element_op_name(ElementOp op) {
  return kElementOps[static_cast<size_t>(op)];
}

int64_t window_output_size(int64_t input, int64_t effective_window, int64_t stride, bool same) {
  if (same) return (input + stride - 1) / stride;
  return input < effective_window ? 0 : (input - effective_window) / stride + 1;
}

void same_padding(int64_t input, int64_t effective_window, int64_t stride, int64_t& before,
                  int64_t& after) {
  const int64_t out = (input + stride - 1) / stride;
  const int64_t needed = (out - 1) * stride + effective_window - input;
  const int64_t total = needed > 0 ? needed : 0;
  before = total / 2;
  after = total - before;
}

const char* loss_kind_name(LossKind k) {
  switch (k) {
    case LossKind::binary_crossentropy:
    case LossKind::binary_crossentropy_logits:
      return "binary_crossentropy";
    case LossKind::categorical_crossentropy:
    case LossKind::categorical_crossentropy_logits:
      return "categorical_crossentropy";
    case LossKind::sparse_categorical_crossentropy:
    case LossKind::sparse_categorical_crossentropy_logits:
      return "sparse_categorical_crossentropy";
    case LossKind::mean_squared_error:
      return "mean_squared_error";
  }
  return "?";
}

}  // namespace troupe::core
