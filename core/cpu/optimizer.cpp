// Optimizer updates through the backend interface on the CPU: the Optimizer's own update
// (what Optimizer::apply_dense runs for host variables), so device kernels are compared
// against exactly it.
#include "core/optimizer.hpp"
#include "core/cpu/cpu_backend.hpp"

namespace troupe::core {

namespace {
constexpr size_t kMaxSlots = 4;
}  // namespace

void CpuBackend::apply_dense(const OptimizerConfig& c, TensorView w, ConstTensorView g,
                             const std::vector<TensorView>& slots, int64_t t) {
  TROUPE_ASSERT(slots.size() <= kMaxSlots, "apply_dense: too many slots");
  float* ptrs[kMaxSlots] = {};
  for (size_t i = 0; i < slots.size(); ++i)
    ptrs[i] = slots[i].data();
  make_optimizer(c)->update_elements(w.data(), g.data(), ptrs, w.size(), t);
}

void CpuBackend::apply_rows(const OptimizerConfig& c, TensorView w, ConstTensorView rows,
                            ConstTensorView grad_rows, const std::vector<TensorView>& slots,
                            int64_t t) {
  TROUPE_ASSERT(slots.size() <= kMaxSlots, "apply_rows: too many slots");
  const auto opt = make_optimizer(c);
  const int64_t width = w.shape().row_size();
  const int64_t* r = rows.data_as<int64_t>();
  float* ptrs[kMaxSlots] = {};
  for (int64_t i = 0; i < rows.size(); ++i) {
    const int64_t at = r[i] * width;
    for (size_t s = 0; s < slots.size(); ++s)
      ptrs[s] = slots[s].data() + at;
    opt->update_elements(w.data() + at, grad_rows.data() + i * width, ptrs, width, t);
  }
}

}  // namespace troupe::core
