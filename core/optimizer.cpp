#include "core/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace troupe::core {

namespace {

using ArrayMap = Eigen::Map<Eigen::ArrayXf, Eigen::Unaligned>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf, Eigen::Unaligned>;

constexpr size_t max_slots = 4;

}  // namespace

SlotSet Optimizer::make_slots(const Shape& shape) const {
  SlotSet s;
  const auto names = slot_names();
  for (size_t i = 0; i < names.size(); ++i)
    s.slots.emplace_back(shape, slot_initial_value(i));
  return s;
}

Status Optimizer::apply_dense(TensorView var, ConstTensorView grad, SlotSet& slots) {
  if (grad.shape() != var.shape())
    return make_error(Errc::invalid_argument,
                      name() + ": gradient of shape " + grad.shape().to_string() +
                          " for a variable of shape " + var.shape().to_string());
  TROUPE_ASSERT(slots.slots.size() == slot_names().size() && slots.slots.size() <= max_slots,
                "slot set made by another optimizer");
  float* slot_ptrs[max_slots] = {};
  for (size_t i = 0; i < slots.slots.size(); ++i) {
    TROUPE_ASSERT(slots.slots[i].size() == var.size(), "slot of another size than its variable");
    slot_ptrs[i] = slots.slots[i].data();
  }
  ++slots.iterations;
  update(var.data(), grad.data(), slot_ptrs, var.size(), slots.iterations);
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

  ++slots.iterations;
  float* slot_ptrs[max_slots] = {};
  for (size_t u = 0; u < unique_rows.size(); ++u) {
    const int64_t at = unique_rows[u] * width;
    for (size_t i = 0; i < slots.slots.size(); ++i)
      slot_ptrs[i] = slots.slots[i].data() + at;
    update(var.data() + at, merged_.data() + static_cast<int64_t>(u) * width, slot_ptrs, width,
           slots.iterations);
  }
  return {};
}

void SGD::update(float* w, const float* g, float* const*, int64_t n, int64_t) {
  ArrayMap(w, n) -= learning_rate() * ConstArrayMap(g, n);
}

void Momentum::update(float* w, const float* g, float* const* slots, int64_t n, int64_t) {
  ArrayMap wa(w, n), v(slots[0], n);
  ConstArrayMap ga(g, n);
  const float lr = learning_rate();
  v = momentum_ * v - lr * ga;
  if (nesterov_) {
    wa += momentum_ * v - lr * ga;
  } else {
    wa += v;
  }
}

void Adagrad::update(float* w, const float* g, float* const* slots, int64_t n, int64_t) {
  ArrayMap wa(w, n), acc(slots[0], n);
  ConstArrayMap ga(g, n);
  acc += ga.square();
  wa -= learning_rate() * ga / (acc.sqrt() + epsilon_);
}

void Adam::update(float* w, const float* g, float* const* slots, int64_t n, int64_t t) {
  ArrayMap wa(w, n), m(slots[0], n), v(slots[1], n);
  ConstArrayMap ga(g, n);
  const double td = static_cast<double>(t);
  const auto lr_t = static_cast<float>(learning_rate() * std::sqrt(1.0 - std::pow(beta_2_, td)) /
                                       (1.0 - std::pow(beta_1_, td)));
  m = beta_1_ * m + (1.0f - beta_1_) * ga;
  v = beta_2_ * v + (1.0f - beta_2_) * ga.square();
  wa -= lr_t * m / (v.sqrt() + epsilon_);
}

std::vector<std::string> RMSprop::slot_names() const {
  if (momentum_ > 0.0f) return {"rms", "momentum"};
  return {"rms"};
}

void RMSprop::update(float* w, const float* g, float* const* slots, int64_t n, int64_t) {
  ArrayMap wa(w, n), ms(slots[0], n);
  ConstArrayMap ga(g, n);
  ms = rho_ * ms + (1.0f - rho_) * ga.square();
  if (momentum_ > 0.0f) {
    ArrayMap mom(slots[1], n);
    mom = momentum_ * mom + learning_rate() * ga / (ms.sqrt() + epsilon_);
    wa -= mom;
  } else {
    wa -= learning_rate() * ga / (ms.sqrt() + epsilon_);
  }
}

void Ftrl::update(float* w, const float* g, float* const* slots, int64_t n, int64_t) {
  ArrayMap wa(w, n), acc(slots[0], n), lin(slots[1], n);
  ConstArrayMap ga(g, n);
  const float lr = learning_rate();
  const Eigen::ArrayXf acc_new = acc + ga.square();
  // n^(-p): square roots in the usual case, pow otherwise.
  const auto root = [&](const Eigen::ArrayXf& a) -> Eigen::ArrayXf {
    return power_ == -0.5f ? a.sqrt().eval() : a.pow(-power_).eval();
  };
  const Eigen::ArrayXf root_new = root(acc_new);
  lin += ga - (root_new - root(acc)) / lr * wa;
  const Eigen::ArrayXf quadratic = (root_new + beta_) / lr + 2.0f * l2_;
  wa = (lin.abs() <= l1_).select(0.0f, (lin.sign() * l1_ - lin) / quadratic);
  acc = acc_new;
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
  else if (name == "rmsprop")
    opt = std::make_unique<RMSprop>(lr);
  else if (name == "ftrl")
    opt = std::make_unique<Ftrl>(lr);
  else
    return make_error(Errc::invalid_argument,
                      "unknown optimizer '" + name +
                          "' (known: sgd, momentum, nesterov, adagrad, adam, rmsprop, ftrl)");
  return Expected<std::unique_ptr<Optimizer>>(std::move(opt));
}

}  // namespace troupe::core
