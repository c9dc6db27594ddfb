// Keras's Embedding: int ids of any shape [batch, ...] -> [batch, ..., output_dim], each id
// replaced by its row of the table "embeddings" [input_dim, output_dim]. The table is an
// embedding table of the graph (Layer::add_table): the graph gathers the unique rows a
// batch uses (Call::rows, from a held table or parameter servers) and each id's index
// among them (Call::index); the backward pass sums the ids' gradients into those rows'
// gradients (the dweights row-gradient convention of core/graph/layer.hpp).

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct EmbeddingState final : CallState {
  Tensor y;
};

class Embedding final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::gather_index}; }
  Embedding(std::string name, int64_t input_dim, int64_t output_dim, Initializer init)
      : Operation("Embedding", std::move(name)), output_dim_(output_dim) {
    add_table("embeddings", Shape{input_dim, output_dim}, init);
  }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::ints)
      return error("takes one input of integer ids, got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    TensorSpec out{ColumnKind::floats, in[0].shape};
    out.shape.push_back(output_dim_);
    return std::vector<TensorSpec>{out};
  }
  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<EmbeddingState>();
  }

  Status forward(Call& c) override {
    auto& s = static_cast<EmbeddingState&>(*c.state);
    const int64_t n = c.table_index.size();
    place(s.y, Shape{n, output_dim_});
    backend().gather_index(c.table_rows, c.table_index, s.y);
    std::vector<int64_t> dims = c.inputs[0].shape.to_vector();
    dims.push_back(output_dim_);
    const Shape out(dims);
    c.outputs = {Ref{ColumnKind::floats, s.y.view().reshaped(out), nullptr, out}};
    return {};
  }

  void backward(Call& c) override {
    if (c.dweights[0] == nullptr) return;
    const int64_t n = c.table_index.size();
    Tensor& grads = place(*c.dweights[0], c.table_rows.shape());
    backend().scatter_add_index(c.doutputs[0].reshaped(Shape{n, output_dim_}), c.table_index,
                                grads);
  }

 private:
  int64_t output_dim_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_embedding(LayerConfig& c) {
  auto input_dim = c.integer("input_dim");
  if (!input_dim) return input_dim.error();
  if (*input_dim <= 0) return c.error("input_dim", "must be positive");
  auto output_dim = c.integer("output_dim");
  if (!output_dim) return output_dim.error();
  if (*output_dim <= 0) return c.error("output_dim", "must be positive");
  // Keras's default: RandomUniform(-0.05, 0.05).
  auto init = c.initializer("embeddings_initializer",
                            {Initializer::Kind::random_uniform, 0.05f, c.seed_for("embeddings")});
  if (!init) return init.error();
  if (auto st = c.allow("mask_zero", {false}); !st) return st.error();
  for (const char* k : {"embeddings_regularizer", "activity_regularizer", "embeddings_constraint",
                        "lora_rank", "quantization_config"})
    if (auto st = c.allow_null(k); !st) return st.error();
  c.raw("lora_alpha");  // matters only with a lora_rank, refused above
  // tf_keras 2 configs: the ids' length, which the model's input fixes already.
  c.raw("input_length");
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Embedding>(c.name(), *input_dim, *output_dim, *init));
}

}  // namespace troupe::core::layers
