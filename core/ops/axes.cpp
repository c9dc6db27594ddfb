// Keras's swapaxes and moveaxis: permutations of the axes (a Permutation, as transpose is:
// a strided copy; the batch axis must stay first).

#include <algorithm>

#include "core/ops/op.hpp"

namespace troupe::core::ops {

namespace {

class Axes final : public Permutation {
 public:
  // swapaxes(a, b): `from` = {a}, `to` = {b}, swapped; moveaxis: `from` moved to `to`.
  Axes(std::string class_name, std::string name, std::vector<int64_t> from, std::vector<int64_t> to)
      : Permutation(std::move(class_name), std::move(name)),
        from_(std::move(from)),
        to_(std::move(to)) {}

 protected:
  Expected<std::vector<int>> permutation(const Dims& x) const override {
    const int rank = static_cast<int>(x.size());
    std::vector<int> from, to;
    for (size_t i = 0; i < from_.size(); ++i) {
      auto a = axis(from_[i], rank, "source axis");
      if (!a) return a.error();
      if (std::find(from.begin(), from.end(), *a) != from.end())
        return error("moves axis " + std::to_string(from_[i]) + " twice");
      auto b = axis(to_[i], rank, "destination axis");
      if (!b) return b.error();
      from.push_back(*a);
      to.push_back(*b);
    }
    std::vector<int> perm(static_cast<size_t>(rank), -1);
    if (class_name() == "Swapaxes") {
      for (int d = 0; d < rank; ++d)
        perm[static_cast<size_t>(d)] = d;
      std::swap(perm[static_cast<size_t>(from[0])], perm[static_cast<size_t>(to[0])]);
      return perm;
    }
    // NumPy's moveaxis: the moved axes at their places, the others in their order.
    std::vector<int> rest;
    for (int d = 0; d < rank; ++d)
      if (std::find(from.begin(), from.end(), d) == from.end()) rest.push_back(d);
    for (size_t i = 0; i < from.size(); ++i) {
      if (perm[static_cast<size_t>(to[i])] >= 0) return error("moves two axes to one place");
      perm[static_cast<size_t>(to[i])] = from[i];
    }
    size_t r = 0;
    for (auto& p : perm)
      if (p < 0) p = rest[r++];
    return perm;
  }

 private:
  std::vector<int64_t> from_, to_;
};

// An int or a list of ints of the config.
Expected<std::vector<int64_t>> axes_of(OpConfig& c, const std::string& key) {
  const auto& v = c.raw(key);
  if (v.is_number_integer()) return std::vector<int64_t>{v.get<int64_t>()};
  std::vector<int64_t> out;
  if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) out.push_back(e.get<int64_t>());
  if (out.empty() || (v.is_array() && out.size() != v.size()))
    return c.error(key, "must be an int or a list of ints");
  return out;
}

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_axes(OpConfig& c) {
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  const bool swap = c.class_name() == "Swapaxes";
  auto from = axes_of(c, swap ? "axis1" : "source");
  if (!from) return from.error();
  auto to = axes_of(c, swap ? "axis2" : "destination");
  if (!to) return to.error();
  if (from->size() != to->size() || (swap && from->size() != 1))
    return c.error(swap ? "axis2" : "destination", "must match the source's count");
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Axes>(c.class_name(), c.name(), std::move(*from), std::move(*to)));
}

}  // namespace troupe::core::ops
