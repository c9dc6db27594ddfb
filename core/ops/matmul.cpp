// Keras's matmul and einsum: batched matrix products (Backend::matmul) of tensors of the
// model or constants of the file. matmul broadcasts its batch axes as NumPy does where one
// operand's batch is the other's or is absent; einsum covers the forms attention and
// projections write (each index in at most two operands, none repeated within one): the
// operands are transposed to [batch, free, contracted] and [batch, contracted, free], an
// index of one operand alone and not in the result summed first, and the product
// transposed to the result's order.

#include <algorithm>
#include <cctype>
#include <map>

#include "core/ops/op.hpp"

namespace troupe::core::ops {

namespace {

int64_t product(const Dims& d, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i)
    n *= d[i];
  return n;
}

struct MatmulState final : OperandState {
  Tensor y, da, db;
};

// y = a @ b, NumPy's matmul: [..., m, k] @ [..., k, n] (a rank-1 b is [k]: one column).
class Matmul final : public Op {
 public:
  Matmul(std::string name, Operand a, Operand b)
      : Op("Matmul", std::move(name)), a_(std::move(a)), b_(std::move(b)) {}

  std::vector<Kernel> kernels() const override { return {Kernel::matmul}; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<MatmulState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    for (const auto& s : in)
      if (s.kind != ColumnKind::floats) return error("takes float tensors, got " + s.to_string());
    Dims a = dims(a_, in), b = dims(b_, in);
    if (a.size() < 2) return error("takes a first operand of 2 axes or more, got " + dims_text(a));
    vector_b_ = b.size() == 1;
    if (vector_b_) b.push_back(1);
    if (a.back() != b[b.size() - 2])
      return error("cannot multiply " + dims_text(a) + " by " + dims_text(dims(b_, in)));
    m_ = a[a.size() - 2];
    k_ = a.back();
    n_ = b.back();
    const Dims ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    // Each operand's batch is the result's, or one matrix for all of it.
    auto batch = broadcast_dims(*this, {ab.empty() ? Dims{kBatch} : ab, bb.empty() ? Dims{1} : bb});
    if (!batch) return batch.error();
    batch_ = *batch;
    a_whole_ = !ab.empty() && ab == batch_;
    b_whole_ = !bb.empty() && bb == batch_;
    const bool a_one = ab.empty() || product(ab, 0, ab.size()) == 1;
    const bool b_one = bb.empty() || (product(bb, 0, bb.size()) == 1 && bb[0] != kBatch);
    if (!(a_whole_ || a_one) || !(b_whole_ || b_one))
      return error("broadcasts the batch axes " + dims_text(ab) + " and " + dims_text(bb) +
                   " in a way Troupe does not (each must be the other's, or absent)");
    Dims out = batch_;
    out.push_back(m_);
    if (!vector_b_) out.push_back(n_);
    auto spec = unbatched(*this, out, ColumnKind::floats);
    if (!spec) return spec.error();
    out_ = out;
    return std::vector<TensorSpec>{*spec};
  }

  Status forward(Call& c) override {
    auto& s = static_cast<MatmulState&>(*c.state);
    const int64_t batch = c.inputs[0].batch();
    const Shape ys = with_batch(out_, batch);
    place(s.y, ys);
    backend().matmul(geometry(batch), value(a_, 0, c), value(b_, 1, c), s.y, precision());
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, ys}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<MatmulState&>(*c.state);
    const int64_t batch = c.inputs[0].batch();
    const int64_t count = with_batch(batch_, batch).num_elements();
    const ConstTensorView a = value(a_, 0, c), b = value(b_, 1, c), dy = c.doutputs[0];
    // da = dy b^T: [count, m, n] x [n, k]; summed over the batch where a is one matrix.
    if (a_.is_tensor() && c.want_dinputs[static_cast<size_t>(a_.input)]) {
      MatmulGeometry g;
      g.batch = count;
      g.m = m_;
      g.n = k_;
      g.k = n_;
      g.transpose_b = true;
      g.stride_a = m_ * n_;
      g.stride_b = b_whole_ ? k_ * n_ : 0;
      g.stride_y = a_whole_ ? m_ * k_ : 0;
      backend().matmul(g, dy, b, place(s.da, a.shape()), precision());
      c.dinputs[static_cast<size_t>(a_.input)] = s.da;
    }
    // db = a^T dy: [k, m] x [m, n] per batch; summed where b is one matrix.
    if (b_.is_tensor() && c.want_dinputs[static_cast<size_t>(b_.input)]) {
      MatmulGeometry g;
      g.batch = count;
      g.m = k_;
      g.n = n_;
      g.k = m_;
      g.transpose_a = true;
      g.stride_a = a_whole_ ? m_ * k_ : 0;
      g.stride_b = m_ * n_;
      g.stride_y = b_whole_ ? k_ * n_ : 0;
      const bool again = a_.input == b_.input && !c.dinputs[static_cast<size_t>(b_.input)].empty();
      if (again) {  // a @ a: the second part adds to the first
        g.accumulate = true;
        backend().matmul(g, a, dy, s.da, precision());
      } else {
        backend().matmul(g, a, dy, place(s.db, b.shape()), precision());
        c.dinputs[static_cast<size_t>(b_.input)] = s.db;
      }
    }
  }

 private:
  MatmulGeometry geometry(int64_t batch) const {
    MatmulGeometry g;
    g.batch = with_batch(batch_, batch).num_elements();
    g.m = m_;
    g.n = n_;
    g.k = k_;
    g.stride_a = a_whole_ ? m_ * k_ : 0;
    g.stride_b = b_whole_ ? k_ * n_ : 0;
    g.stride_y = m_ * n_;
    if (!a_whole_ || b_whole_) return g;
    // One matrix b for every batch: a's batch folded into its rows, one product.
    g.m = g.batch * m_;
    g.batch = 1;
    return g;
  }

  Operand a_, b_;
  bool vector_b_ = false, a_whole_ = false, b_whole_ = false;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  Dims batch_, out_;
};

// einsum of one or two operands, as transposes, sums and one batched product.
struct EinsumState final : OperandState {
  Tensor at, bt, as, bs, prod, y;  // forward: the operands transposed (and summed), product
  Tensor dprod, dat, dbt, da, db;  // backward
  Tensor widened;                  // a gradient broadcast over an operand's summed letters
};

class Einsum final : public Op {
 public:
  Einsum(std::string name, std::string subscripts, std::vector<Operand> operands)
      : Op("Einsum", std::move(name)),
        subscripts_(std::move(subscripts)),
        operands_(std::move(operands)) {}

  std::vector<Kernel> kernels() const override {
    return {Kernel::matmul, Kernel::copy_strided, Kernel::reduce};
  }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<EinsumState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    for (const auto& s : in)
      if (s.kind != ColumnKind::floats) return error("takes float tensors, got " + s.to_string());
    // "ab,bc->ac": the operands' index letters and the result's.
    const auto arrow = subscripts_.find("->");
    if (arrow == std::string::npos)
      return error("subscripts '" + subscripts_ + "' without '->' are not supported");
    std::vector<std::string> terms;
    std::string t;
    for (char ch : subscripts_.substr(0, arrow)) {
      if (ch == ',') {
        terms.push_back(t);
        t.clear();
      } else if (ch != ' ') {
        t.push_back(ch);
      }
    }
    terms.push_back(t);
    out_letters_.clear();
    for (char ch : subscripts_.substr(arrow + 2))
      if (ch != ' ') out_letters_.push_back(ch);
    for (char ch : out_letters_)
      if (std::count(out_letters_.begin(), out_letters_.end(), ch) > 1)
        return error("repeats index '" + std::string(1, ch) + "' in the result");
    if (terms.size() != operands_.size() || terms.size() > 2)
      return error("subscripts '" + subscripts_ + "' for " + std::to_string(operands_.size()) +
                   " operands: Troupe's einsum takes one or two");
    std::map<char, int64_t> size;
    for (size_t k = 0; k < terms.size(); ++k) {
      const Dims d = dims(operands_[k], in);
      if (terms[k].size() != d.size())
        return error("subscripts '" + terms[k] + "' for an operand of " + dims_text(d));
      for (size_t i = 0; i < d.size(); ++i) {
        const char ch = terms[k][i];
        if (!std::isalpha(static_cast<unsigned char>(ch)))
          return error("subscripts '" + subscripts_ + "': only letters are supported");
        if (std::count(terms[k].begin(), terms[k].end(), ch) > 1)
          return error("repeats index '" + std::string(1, ch) + "' within one operand");
        auto it = size.find(ch);
        if (it != size.end() && it->second != d[i])
          return error("index '" + std::string(1, ch) + "' has sizes " + dims_text({it->second}) +
                       " and " + dims_text({d[i]}));
        size[ch] = d[i];
      }
    }
    for (char ch : out_letters_)
      if (!size.count(ch))
        return error("result index '" + std::string(1, ch) + "' is in no operand");
    terms_ = terms;
    size_ = size;
    // Letters: batch (both operands and the result), contracted (both, not the result),
    // free (one operand and the result), summed (one operand alone).
    const std::string a = terms[0], b = terms.size() > 1 ? terms[1] : std::string();
    auto in_out = [&](char ch) { return out_letters_.find(ch) != std::string::npos; };
    batch_.clear();
    contract_.clear();
    free_a_.clear();
    free_b_.clear();
    for (char ch : out_letters_) {
      const bool ia = a.find(ch) != std::string::npos, ib = b.find(ch) != std::string::npos;
      if (ia && ib)
        batch_.push_back(ch);
      else if (ia)
        free_a_.push_back(ch);
      else
        free_b_.push_back(ch);
    }
    for (char ch : a)
      if (!in_out(ch) && b.find(ch) != std::string::npos) contract_.push_back(ch);
    // Each operand's order for the product: [batch, free, contracted] and [batch, contracted,
    // free]; its summed letters last, to be reduced away first.
    order_a_ = batch_ + free_a_ + contract_;
    order_b_ = batch_ + contract_ + free_b_;
    for (char ch : a)
      if (order_a_.find(ch) == std::string::npos) order_a_.push_back(ch);
    for (char ch : b)
      if (order_b_.find(ch) == std::string::npos) order_b_.push_back(ch);
    if (operands_.size() == 1) {  // one operand: a transpose, then a sum of what the result drops
      order_a_ = out_letters_;
      for (char ch : a)
        if (!in_out(ch)) order_a_.push_back(ch);
    }
    Dims out;
    for (char ch : out_letters_)
      out.push_back(size_.at(ch));
    auto spec = unbatched(*this, out, ColumnKind::floats);
    if (!spec) return spec.error();
    return std::vector<TensorSpec>{*spec};
  }

  Status forward(Call& c) override {
    auto& s = static_cast<EinsumState&>(*c.state);
    batch_size_ = c.inputs[0].batch();
    const ConstTensorView a =
        prepare(value(operands_[0], 0, c), terms_[0], order_a_,
                operands_.size() == 1 ? out_letters_.size()
                                      : batch_.size() + free_a_.size() + contract_.size(),
                s.at, s.as);
    if (operands_.size() == 1) {
      copy_out(a, out_letters_, s.y, c);
      return {};
    }
    const ConstTensorView b =
        prepare(value(operands_[1], 1, c), terms_[1], order_b_,
                batch_.size() + contract_.size() + free_b_.size(), s.bt, s.bs);
    const MatmulGeometry g = geometry();
    place(s.prod, Shape{g.batch, g.m, g.n});
    backend().matmul(g, a, b, s.prod, precision());
    copy_out(s.prod, batch_ + free_a_ + free_b_, s.y, c);
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<EinsumState&>(*c.state);
    const ConstTensorView dy = c.doutputs[0];
    if (operands_.size() == 1) {
      back_to(dy, out_letters_, 0, c, s.da, s.widened);
      return;
    }
    // The product's gradient in [batch, free_a, free_b] order.
    const std::string prod_order = batch_ + free_a_ + free_b_;
    gather_letters(dy, out_letters_, prod_order, s.dprod);
    const MatmulGeometry g = geometry();
    const ConstTensorView a =
        s.as.data() != nullptr ? ConstTensorView(s.as) : ConstTensorView(s.at);
    const ConstTensorView b =
        s.bs.data() != nullptr ? ConstTensorView(s.bs) : ConstTensorView(s.bt);
    if (wants(0, c)) {  // d(a) [batch, m, k] = dprod [batch, m, n] b^T
      MatmulGeometry d = g;
      d.n = g.k;
      d.k = g.n;
      d.transpose_b = true;
      d.stride_a = g.m * g.n;
      d.stride_b = g.k * g.n;
      d.stride_y = g.m * g.k;
      place(s.dat, Shape{g.batch, g.m, g.k});
      backend().matmul(d, s.dprod, b, s.dat, precision());
      back_to(s.dat, batch_ + free_a_ + contract_, 0, c, s.da, s.widened);
    }
    if (wants(1, c)) {  // d(b) [batch, k, n] = a^T dprod
      MatmulGeometry d = g;
      d.m = g.k;
      d.k = g.m;
      d.transpose_a = true;
      d.stride_a = g.m * g.k;
      d.stride_b = g.m * g.n;
      d.stride_y = g.k * g.n;
      place(s.dbt, Shape{g.batch, g.k, g.n});
      backend().matmul(d, a, s.dprod, s.dbt, precision());
      back_to(s.dbt, batch_ + contract_ + free_b_, 1, c, s.db, s.widened);
    }
  }

 private:
  int64_t sizes(const std::string& letters) const {
    int64_t n = 1;
    for (char ch : letters)
      n *= letter_size(ch);
    return n;
  }
  int64_t letter_size(char ch) const {
    const int64_t n = size_.at(ch);
    return n == kBatch ? batch_size_ : n;
  }
  bool wants(size_t k, const Call& c) const {
    return operands_[k].is_tensor() && c.want_dinputs[static_cast<size_t>(operands_[k].input)];
  }
  MatmulGeometry geometry() const {
    MatmulGeometry g;
    g.batch = sizes(batch_);
    g.m = sizes(free_a_);
    g.k = sizes(contract_);
    g.n = sizes(free_b_);
    g.stride_a = g.m * g.k;
    g.stride_b = g.k * g.n;
    g.stride_y = g.m * g.n;
    return g;
  }
  // x (letters `from`, its own shape) with its axes in the order `to` (a permutation).
  void gather_letters(ConstTensorView x, const std::string& from, const std::string& to,
                      Tensor& out) {
    std::vector<int> perm;
    for (char ch : to)
      perm.push_back(static_cast<int>(from.find(ch)));
    transpose(x, perm, out);
  }
  // An operand in `order`, its letters past `keep` summed away: the tensor the product reads.
  ConstTensorView prepare(ConstTensorView x, const std::string& letters, const std::string& order,
                          size_t keep, Tensor& transposed, Tensor& summed) {
    gather_letters(x, letters, order, transposed);
    if (keep >= order.size()) {
      summed = Tensor();
      return transposed;
    }
    std::vector<int64_t> kept;
    for (size_t i = 0; i < order.size(); ++i)
      kept.push_back(i < keep ? letter_size(order[i]) : 1);
    backend().reduce(Reduce::sum, transposed, place(summed, Shape(kept)));
    return summed;
  }
  // The product (letters `order`) to the result's order.
  void copy_out(ConstTensorView prod, const std::string& order, Tensor& y, Call& c) {
    std::vector<int64_t> dims;
    for (char ch : order)
      dims.push_back(letter_size(ch));
    gather_letters(prod.reshaped(Shape(dims)), order, out_letters_, y);
    c.outputs = {Ref{ColumnKind::floats, y, nullptr, y.shape()}};
  }
  // The gradient of operand k from g (letters `order`, kept letters only): broadcast over
  // its summed letters, then transposed to the operand's own order.
  void back_to(ConstTensorView g, const std::string& order, size_t k, Call& c, Tensor& dx,
               Tensor& widened) {
    const std::string& letters = terms_[k];
    const std::string& full = k == 0 ? order_a_ : order_b_;
    std::vector<int64_t> dims, kept;
    for (char ch : full) {
      dims.push_back(letter_size(ch));
      kept.push_back(order.find(ch) != std::string::npos ? letter_size(ch) : 1);
    }
    ConstTensorView in_full = g.reshaped(Shape(kept));
    if (Shape(kept) != Shape(dims)) {  // summed letters: the gradient is the same for each
      broadcast(in_full, Shape(dims), widened);
      in_full = widened;
    }
    gather_letters(in_full, full, letters, dx);
    c.dinputs[static_cast<size_t>(operands_[k].input)] = dx;
  }

  std::string subscripts_;
  std::vector<Operand> operands_;
  std::vector<std::string> terms_;
  std::string out_letters_, batch_, contract_, free_a_, free_b_, order_a_, order_b_;
  std::map<char, int64_t> size_;
  int64_t batch_size_ = 1;
};

Expected<Operand> operand(OpConfig& c, size_t i, const std::string& key) {
  const Arg* a = c.arg(i, key);
  if (a == nullptr) return c.arg_error(key, "is missing");
  return Operand::from(*a, c, "argument '" + key + "'");
}

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_matmul(OpConfig& c) {
  auto a = operand(c, 0, "x1");
  if (!a) return a.error();
  auto b = operand(c, 1, "x2");
  if (!b) return b.error();
  if (!a->is_tensor() && !b->is_tensor()) return c.arg_error("x1", "and x2 are both constants");
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Matmul>(c.name(), std::move(*a), std::move(*b)));
}

Expected<std::unique_ptr<graph::Operation>> make_einsum(OpConfig& c) {
  auto subscripts = c.string("subscripts", "");
  if (!subscripts) return subscripts.error();
  std::vector<Operand> operands;
  for (size_t i = 0; i < c.positional(); ++i) {
    auto o = operand(c, i, "operands");
    if (!o) return o.error();
    operands.push_back(std::move(*o));
  }
  if (operands.empty()) return c.arg_error("operands", "are missing");
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Einsum>(c.name(), *subscripts, std::move(operands)));
}

}  // namespace troupe::core::ops
