#include "core/nn/embedding.hpp"

#include <algorithm>

#include "core/partitioner.hpp"

namespace troupe::core {

Embedding::Embedding(std::string name, int64_t vocab, int64_t dim, uint64_t seed)
    : name_(std::move(name)),
      // Keras' Embedding default: uniform in [-0.05, 0.05].
      table_(initialize(Shape{vocab, dim},
                        Initializer{Initializer::Kind::random_uniform, 0.05f, seed})) {}

Expected<ConstTensorView> Embedding::forward(const std::vector<int64_t>& ids, Shape ids_shape) {
  TROUPE_ASSERT(static_cast<int64_t>(ids.size()) == ids_shape.num_elements() &&
                    ids_shape.rank() < Shape::max_rank,
                "Embedding: ids do not match their shape");
  const int64_t vocab = table_.shape()[0], dim = table_.shape()[1];
  for (int64_t id : ids)
    if (id < 0 || id >= vocab)
      return make_error(Errc::out_of_range, name_ + ": id " + std::to_string(id) +
                                                " outside the vocabulary [0, " +
                                                std::to_string(vocab) + ")");
  ids_ = ids;
  std::vector<int64_t> dims = ids_shape.to_vector();
  dims.push_back(dim);
  y_.resize(Shape(dims));
  for (size_t i = 0; i < ids.size(); ++i)
    std::copy_n(table_.data() + ids[i] * dim, dim, y_.data() + static_cast<int64_t>(i) * dim);
  return ConstTensorView(y_);
}

const SparseGrad& Embedding::backward(ConstTensorView dy) {
  const int64_t dim = table_.shape()[1];
  TROUPE_ASSERT(dy.size() == static_cast<int64_t>(ids_.size()) * dim,
                "Embedding backward: dy does not match the last forward");
  grad_.rows = ids_;
  std::sort(grad_.rows.begin(), grad_.rows.end());
  grad_.rows.erase(std::unique(grad_.rows.begin(), grad_.rows.end()), grad_.rows.end());
  grad_.values.resize(Shape{static_cast<int64_t>(grad_.rows.size()), dim});
  grad_.values.fill(0.0f);
  for (size_t i = 0; i < ids_.size(); ++i) {
    const auto at =
        std::lower_bound(grad_.rows.begin(), grad_.rows.end(), ids_[i]) - grad_.rows.begin();
    float* dst = grad_.values.data() + at * dim;
    const float* src = dy.data() + static_cast<int64_t>(i) * dim;
    for (int64_t j = 0; j < dim; ++j)
      dst[j] += src[j];
  }
  return grad_;
}

}  // namespace troupe::core
