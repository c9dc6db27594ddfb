#include "core/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

namespace troupe::core {

namespace {

using ArrayMap = Eigen::Map<Eigen::ArrayXf, Eigen::Unaligned>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf, Eigen::Unaligned>;

constexpr size_t max_slots = 4;

}  // namespace

void Optimizer::set_learning_rate_decay(int64_t steps, float rate, bool staircase) {
  decay_steps_ = steps;
  decay_rate_ = rate;
  staircase_ = staircase;
}

float Optimizer::learning_rate_at(int64_t t) const {
  if (decay_steps_ <= 0) return learning_rate_;
  OptimizerConfig c;
  c.learning_rate = learning_rate_;
  c.decay_steps = decay_steps_;
  c.decay_rate = decay_rate_;
  c.staircase = staircase_;
  return c.learning_rate_at(t);
}

OptimizerConfig Optimizer::config() const {
  OptimizerConfig c = kind_config();
  c.learning_rate = learning_rate_;
  c.weight_decay = weight_decay_;
  c.decay_steps = decay_steps_;
  c.decay_rate = decay_rate_;
  c.staircase = staircase_;
  return c;
}

void Optimizer::update_elements(float* w, const float* g, float* const* slots, int64_t n,
                                int64_t t) {
  const float lr = learning_rate_at(t);
  // Keras decays before the update step, which (FTRL) reads the decayed value.
  if (weight_decay_ != 0.0f) {
    ArrayMap wa(w, n);
    wa -= wa * weight_decay_ * lr;
  }
  update(w, g, slots, n, lr, t);
}

SlotSet Optimizer::make_slots(const Shape& shape, Device device) const {
  SlotSet s;
  const auto names = slot_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (device.is_cpu()) {
      s.slots.emplace_back(shape, slot_initial_value(i));
    } else {
      s.slots.emplace_back(shape, DType::float32, device);
      s.slots.back().fill(slot_initial_value(i));
    }
  }
  return s;
}

Status Optimizer::apply_dense(TensorView var, ConstTensorView grad, SlotSet& slots) {
  if (grad.shape() != var.shape())
    return make_error(Errc::invalid_argument,
                      name() + ": gradient of shape " + grad.shape().to_string() +
                          " for a variable of shape " + var.shape().to_string());
  TROUPE_ASSERT(slots.slots.size() == slot_names().size() && slots.slots.size() <= max_slots,
                "slot set made by another optimizer");
  if (grad.device() != var.device())
    return make_error(Errc::invalid_argument, name() + ": gradient on " +
                                                  grad.device().to_string() +
                                                  " for a variable on " + var.device().to_string());
  if (!var.device().is_cpu()) {
    auto backend = backend_for(var.device());
    if (!backend) return backend.error();
    std::vector<TensorView> slot_views;
    for (auto& slot : slots.slots)
      slot_views.push_back(slot.view());
    ++slots.iterations;
    (*backend)->apply_dense(config(), var, grad, slot_views, slots.iterations);
    return {};
  }
  for (const Tensor& slot : slots.slots)
    TROUPE_ASSERT(slot.size() == var.size(), "slot of another size than its variable");
  ++slots.iterations;
  // The update is elementwise, in a few passes (Adagrad: the accumulator, then the
  // variable). Block by block, a block's gradient and slots are still in L1 cache for the
  // next pass; over the whole of a big variable each pass would stream it from memory again
  // (a 400x400 kernel's update took ~7 ns an element on a PS task that way).
  constexpr int64_t block = 2048;  // elements: 8 KiB of each array
  float* slot_ptrs[max_slots] = {};
  const int64_t n = var.size();
  for (int64_t at = 0; at < n; at += block) {
    for (size_t i = 0; i < slots.slots.size(); ++i)
      slot_ptrs[i] = slots.slots[i].data() + at;
    update_elements(var.data() + at, grad.data() + at, slot_ptrs, std::min(block, n - at),
                    slots.iterations);
  }
  return {};
}

Status Optimizer::apply_rows_on_device(TensorView var, const std::vector<int64_t>& rows,
                                       ConstTensorView grad_rows, SlotSet& slots) {
  std::vector<int64_t> sorted = rows;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return make_error(Errc::invalid_argument,
                      name() + ": a sparse update of a variable on " + var.device().to_string() +
                          " takes unique rows (sum repeated ones first, as unique_ids does)");
  auto backend = backend_for(var.device());
  if (!backend) return backend.error();
  const auto count = static_cast<int64_t>(rows.size());
  if (device_rows_.device() != var.device() || device_rows_.size() < count)
    device_rows_ = Tensor(Shape{count}, DType::int64, var.device());
  device_rows_.resize(Shape{count});
  copy(ConstTensorView(rows.data(), Shape{count}, Device::cpu(), DType::int64), device_rows_);
  std::vector<TensorView> slot_views;
  for (auto& slot : slots.slots)
    slot_views.push_back(slot.view());
  ++slots.iterations;
  (*backend)->apply_rows(config(), var, device_rows_, grad_rows, slot_views, slots.iterations);
  return {};
}

Status Optimizer::apply_sparse(TensorView var, const std::vector<int64_t>& rows,
                               ConstTensorView grad_rows, SlotSet& slots) {
  const int64_t nrows = var.shape().rank() == 0 ? 1 : var.shape()[0];
  const int64_t width = var.shape().row_size();
  if (grad_rows.size() != static_cast<int64_t>(rows.size()) * width)
    return make_error(Errc::invalid_argument, name() + ": sparse gradient of shape " +
                                                  grad_rows.shape().to_string() + " for " +
                                                  std::to_string(rows.size()) + " rows of width " +
                                                  std::to_string(width));
  for (int64_t r : rows)
    if (r < 0 || r >= nrows)
      return make_error(Errc::out_of_range, name() + ": row " + std::to_string(r) +
                                                " outside a variable of " + std::to_string(nrows) +
                                                " rows");
  TROUPE_ASSERT(slots.slots.size() == slot_names().size() && slots.slots.size() <= max_slots,
                "slot set made by another optimizer");
  if (!var.device().is_cpu()) return apply_rows_on_device(var, rows, grad_rows, slots);

  ++slots.iterations;
  float* slot_ptrs[max_slots] = {};
  const auto update_row = [&](int64_t row, const float* grad) {
    for (size_t i = 0; i < slots.slots.size(); ++i)
      slot_ptrs[i] = slots.slots[i].data() + row * width;
    update_elements(var.data() + row * width, grad, slot_ptrs, width, slots.iterations);
  };
  if (std::adjacent_find(rows.begin(), rows.end(), std::greater_equal<int64_t>()) == rows.end()) {
    // Each row once, ascending (the unique ids a worker pushes): no merging. The rows of a big
    // table are scattered: ask for a few rows ahead so that their cache misses overlap.
    constexpr size_t ahead = 8;
    for (size_t k = 0; k < rows.size(); ++k) {
      if (k + ahead < rows.size()) {
        const int64_t at = rows[k + ahead] * width;
        __builtin_prefetch(var.data() + at, 1);
        for (const Tensor& slot : slots.slots)
          __builtin_prefetch(slot.data() + at, 1);
      }
      update_row(rows[k], grad_rows.data() + static_cast<int64_t>(k) * width);
    }
    return {};
  }
  // Sum repeated rows so that each row is updated once (the result must not depend on how
  // a batch happened to repeat an id).
  order_.resize(rows.size());
  std::iota(order_.begin(), order_.end(), 0);
  std::sort(order_.begin(), order_.end(), [&](int64_t a, int64_t b) { return rows[a] < rows[b]; });
  merged_.resize(Shape{static_cast<int64_t>(rows.size()), width});
  std::vector<int64_t> unique_rows;
  unique_rows.reserve(rows.size());
  for (int64_t k : order_) {
    const float* g = grad_rows.data() + k * width;
    if (!unique_rows.empty() && unique_rows.back() == rows[k]) {
      float* dst = merged_.data() + (static_cast<int64_t>(unique_rows.size()) - 1) * width;
      for (int64_t j = 0; j < width; ++j)
        dst[j] += g[j];
    } else {
      std::copy_n(g, width, merged_.data() + static_cast<int64_t>(unique_rows.size()) * width);
      unique_rows.push_back(rows[k]);
    }
  }

  for (size_t u = 0; u < unique_rows.size(); ++u)
    update_row(unique_rows[u], merged_.data() + static_cast<int64_t>(u) * width);
  return {};
}

void SGD::update(float* w, const float* g, float* const*, int64_t n, float lr, int64_t) {
  ArrayMap(w, n) -= lr * ConstArrayMap(g, n);
}

void Momentum::update(float* w, const float* g, float* const* slots, int64_t n, float lr, int64_t) {
  ArrayMap wa(w, n), v(slots[0], n);
  ConstArrayMap ga(g, n);
  v = momentum_ * v - lr * ga;
  if (nesterov_) {
    wa += momentum_ * v - lr * ga;
  } else {
    wa += v;
  }
}

void Adagrad::update(float* w, const float* g, float* const* slots, int64_t n, float lr, int64_t) {
  ArrayMap wa(w, n), acc(slots[0], n);
  ConstArrayMap ga(g, n);
  acc += ga.square();
  wa -= lr * ga / (acc + epsilon_).sqrt();
}

void Adam::update(float* w, const float* g, float* const* slots, int64_t n, float lr, int64_t t) {
  ArrayMap wa(w, n), m(slots[0], n), v(slots[1], n);
  ConstArrayMap ga(g, n);
  const double td = static_cast<double>(t);
  const auto lr_t = static_cast<float>(lr * std::sqrt(1.0 - std::pow(beta_2_, td)) /
                                       (1.0 - std::pow(beta_1_, td)));
  // Keras's order of operations: m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2).
  m += (ga - m) * (1.0f - beta_1_);
  v += (ga.square() - v) * (1.0f - beta_2_);
  wa -= m * lr_t / (v.sqrt() + epsilon_);
}

std::vector<std::string> RMSprop::slot_names() const {
  if (momentum_ > 0.0f) return {"rms", "momentum"};
  return {"rms"};
}

void RMSprop::update(float* w, const float* g, float* const* slots, int64_t n, float lr, int64_t) {
  ArrayMap wa(w, n), ms(slots[0], n);
  ConstArrayMap ga(g, n);
  ms = rho_ * ms + (1.0f - rho_) * ga.square();
  if (momentum_ > 0.0f) {
    ArrayMap mom(slots[1], n);
    mom = momentum_ * mom + lr * ga / (ms + epsilon_).sqrt();
    wa -= mom;
  } else {
    wa -= lr * ga / (ms + epsilon_).sqrt();
  }
}

void Ftrl::update(float* w, const float* g, float* const* slots, int64_t n, float lr, int64_t) {
  ArrayMap wa(w, n), acc(slots[0], n), lin(slots[1], n);
  ConstArrayMap ga(g, n);
  const Eigen::ArrayXf acc_new = acc + ga.square();
  // n^(-p): square roots in the usual case, pow otherwise.
  const auto root = [&](const Eigen::ArrayXf& a) -> Eigen::ArrayXf {
    return power_ == -0.5f ? a.sqrt().eval() : a.pow(-power_).eval();
  };
  const Eigen::ArrayXf root_new = root(acc_new);
  if (l2_shrinkage_ != 0.0f)
    lin += ga + 2.0f * l2_shrinkage_ * wa - (root_new - root(acc)) / lr * wa;
  else
    lin += ga - (root_new - root(acc)) / lr * wa;
  const Eigen::ArrayXf quadratic = (root_new + beta_) / lr + 2.0f * l2_;
  wa = (lin.abs() <= l1_).select(0.0f, (lin.sign() * l1_ - lin) / quadratic);
  acc = acc_new;
}

OptimizerConfig SGD::kind_config() const {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::sgd;
  return c;
}

OptimizerConfig Momentum::kind_config() const {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::momentum;
  c.momentum = momentum_;
  c.nesterov = nesterov_;
  return c;
}

OptimizerConfig Adagrad::kind_config() const {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::adagrad;
  c.initial_accumulator = initial_;
  c.epsilon = epsilon_;
  return c;
}

OptimizerConfig Adam::kind_config() const {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::adam;
  c.beta_1 = beta_1_;
  c.beta_2 = beta_2_;
  c.epsilon = epsilon_;
  return c;
}

OptimizerConfig RMSprop::kind_config() const {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::rmsprop;
  c.rho = rho_;
  c.momentum = momentum_;
  c.epsilon = epsilon_;
  return c;
}

OptimizerConfig Ftrl::kind_config() const {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::ftrl;
  c.power = power_;
  c.initial_accumulator = initial_;
  c.l1 = l1_;
  c.l2 = l2_;
  c.beta = beta_;
  c.l2_shrinkage = l2_shrinkage_;
  return c;
}

namespace {

std::unique_ptr<Optimizer> make_kind(const OptimizerConfig& c) {
  using Kind = OptimizerConfig::Kind;
  switch (c.kind) {
    case Kind::sgd:
      return std::make_unique<SGD>(c.learning_rate);
    case Kind::momentum:
      return std::make_unique<Momentum>(c.learning_rate, c.momentum, c.nesterov);
    case Kind::adagrad:
      return std::make_unique<Adagrad>(c.learning_rate, c.initial_accumulator, c.epsilon);
    case Kind::adam:
      return std::make_unique<Adam>(c.learning_rate, c.beta_1, c.beta_2, c.epsilon);
    case Kind::rmsprop:
      return std::make_unique<RMSprop>(c.learning_rate, c.rho, c.momentum, c.epsilon);
    case Kind::ftrl:
      return std::make_unique<Ftrl>(c.learning_rate, c.power, c.initial_accumulator, c.l1, c.l2,
                                    c.beta, c.l2_shrinkage);
  }
  return std::make_unique<SGD>(c.learning_rate);
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c) {
  auto opt = make_kind(c);
  opt->set_weight_decay(c.weight_decay);
  opt->set_learning_rate_decay(c.decay_steps, c.decay_rate, c.staircase);
  return opt;
}

Expected<std::unique_ptr<Optimizer>> make_optimizer(const std::string& name, float lr) {
  std::unique_ptr<Optimizer> opt;
  if (name == "sgd")
    opt = std::make_unique<SGD>(lr);
  else if (name == "momentum")
    opt = std::make_unique<Momentum>(lr, 0.9f, false);
  else if (name == "nesterov")
    opt = std::make_unique<Momentum>(lr, 0.9f, true);
  else if (name == "adagrad")
    opt = std::make_unique<Adagrad>(lr);
  else if (name == "adam")
    opt = std::make_unique<Adam>(lr);
  else if (name == "adamw") {
    opt = std::make_unique<Adam>(lr);
    opt->set_weight_decay(0.004f);  // keras.optimizers.AdamW's default
  } else if (name == "rmsprop")
    opt = std::make_unique<RMSprop>(lr);
  else if (name == "ftrl")
    opt = std::make_unique<Ftrl>(lr);
  else
    return make_error(
        Errc::invalid_argument,
        "unknown optimizer '" + name +
            "' (known: sgd, momentum, nesterov, adagrad, adam, adamw, rmsprop, ftrl)");
  return Expected<std::unique_ptr<Optimizer>>(std::move(opt));
}

}  // namespace troupe::core
