#pragma once

// Troupe's built-in models in Keras's form (the Fashion-MNIST classifiers further below).
//
// The click-through-rate models (core/nn/ctr_model.hpp: LR, FM, DeepFM, Wide&Deep): the Keras 3
// Functional model that computes their formulas, made of the layers and operations a .keras
// file brings (Embedding, keras.ops' indexing, GlobalAveragePooling1D, Rescaling, Troupe's
// FactorizationMachine, Flatten, Concatenate, Dense, Add), and the values of the programs'
// variables (ctr_dense_variables and the table) as that model's weights. A built-in model
// trained by ctr_ps or ctr_fit so goes back to Keras (and to `troupe predict`'s Keras path)
// as a .keras file:
//
//   inputs   ids [fields] int64: the global row ids of the table (field f's bucket b is
//                                row f * buckets + b, as ctr_ps's readers make them)
//            dense [dense] float32 (absent when the model has no dense features)
//   embedding     Embedding(rows, 1 + dim): the programs' table itself, a row per id
//   linear        embedding[:, :, 0:1] (keras.ops GetItem; LR's table is this column alone)
//                 -> GlobalAveragePooling1D -> Rescaling(fields): sum_f w[id_f]
//   dense_linear  Dense(1) on dense: u . dense + b
//   factors       embedding[:, :, 1:]: v[id_f]
//   fm            FactorizationMachine on factors (fm, deepfm)
//   dnn_0..       Dense(relu) on concat(flatten(factors), dense), then dnn_out Dense(1)
//                 (deepfm, wide_deep)
//   logit         Add of the terms: the logit, a binary cross-entropy from logits
//
// Each id counts once (the value 1 Criteo's and ctr_datagen's ids carry) unless the form is
// made `weighted` (below): an export's form is not, so a model trained on values other
// than 1 scores those examples differently there. Without
// dense features the bias has no Dense to live in: a deep model's is added to dnn_out's
// bias, and LR's and FM's is spread over the fields' linear weights (b / fields in column 0
// of every row, so every example's sum holds it once).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint/checkpoint.hpp"
#include "core/data/example.hpp"
#include "core/expected.hpp"
#include "core/graph/graph.hpp"
#include "core/nn/ctr_export.hpp"
#include "core/nn/ctr_model.hpp"
#include "core/tensor.hpp"

namespace troupe::core::keras {

/// The model's config.json object (module, class_name, config, compile_config) over a
/// table of `rows` rows: its loss, AUC and accuracy from logits, and the optimizer
/// `optimizer` (core::make_optimizer's names, Keras's defaults besides the rate; "" for
/// Keras's compile() default, RMSprop at 0.001). Initializers as the programs' variables':
/// the tables uniform in [-0.05, 0.05], kernels Glorot-uniform, biases zero.
/// With `weighted`, a third input `values` [fields] (float32) scales each id's row before
/// anything uses it (Reshape to [fields, 1], then Multiply with the Embedding's output),
/// as the models' formulas scale them by the batch's values. No program writes the weighted
/// form to a file yet (graph_tests check it against the formulas in Troupe's graph; Keras has
/// not loaded one).
nlohmann::json ctr_model_config(const CtrModelConfig& config, int64_t rows,
                                const std::string& optimizer = "", float learning_rate = 0.0f,
                                bool weighted = false);

/// The graph weight of the Keras form that holds the programs' variable
/// `parameter` (ctr_dense_variables()'s names: "dense_w" is "dense_linear/kernel", "bias"
/// "dense_linear/bias", "dnn/dense_N/kernel" "dnn_N/kernel" and the last one's
/// "dnn_out/kernel"); "" for the bias of a model without dense features (it has no weight
/// of its own there) and for a name the model does not have. The table is
/// "embedding/embeddings", of the same layout.
std::string ctr_graph_path(const CtrModelConfig& config, const std::string& parameter);

/// The Keras form's weights (by graph weight path, "dnn_0/kernel") holding the programs'
/// variables' values: `dense` its parameters by ctr_dense_variables()'s names, `rows` its
/// table [rows, row_width]. A missing parameter or a shape that differs is an
/// invalid_argument error naming it; so is the `weighted` form of LR or FM without dense
/// features (the bias spread over the linear table's rows would be scaled by the values).
Expected<std::map<std::string, Tensor>> ctr_model_values(const CtrModelConfig& config,
                                                         const std::map<std::string, Tensor>& dense,
                                                         const Tensor& rows, bool weighted = false);

/// The programs' name of each of the form's weights that has one, by graph path
/// ("dense_linear/kernel" -> "dense_w", "embedding/embeddings" -> "embedding", ...): what a
/// PS backup of a ModelSpec::ctr job called them (BackupAndRestore::Options::former_names).
/// The bias of a model without dense features has no weight of its own: not among them.
std::map<std::string, std::string> ctr_former_names(const CtrModelConfig& config);

/// The programs' dense variables (ctr_dense_variables()'s names) from the form's weights by
/// graph path (the table is not among them: its layout is the same): ctr_model_values's
/// inverse, but for the bias of a model without dense features, which the form holds
/// elsewhere (dnn_out's bias, the linear weights): there it is 0, and the model computes
/// the same logits. A weight missing or of another shape is an invalid_argument error.
Expected<std::map<std::string, Tensor>> ctr_program_values(
    const CtrModelConfig& config, const std::map<std::string, Tensor>& weights);

/// A batch of the sparse readers' examples (each `fields` ids with their values, `dense`
/// features) as the form's data, into `out` (its buffers reused batch after batch): `ids`
/// [n, fields] (ints), `values` [n, fields] for the `weighted` form, `dense` [n, dense], and
/// with `labels` the label column `label` [n, 1] (floats). An example of another id or
/// dense-feature count is an invalid_argument error naming it; so is an id of a value other
/// than 1 for the plain form (it would count once).
Status ctr_columns(const CtrModelConfig& config, const Batch& sparse, bool weighted, bool labels,
                   Batch& out);

/// The config of a graph built from ctr_model_config's form (its plain form): its fields,
/// dense features, factors, hidden widths and kind read back from its inputs, weights and
/// operations (the seed is not). A graph of another form is an invalid_argument error.
Expected<CtrModelConfig> ctr_form_config(const graph::Graph& graph);

/// Whether `checkpoint` holds the programs' variables (ctr_dense_variables()'s names and
/// the table `embedding` [rows, row_width]): what ctr_fit and the side-car evaluator wrote
/// before the built-in model was trained as its Keras form.
bool is_ctr_program_checkpoint(const Checkpoint& checkpoint);

/// The one-way migration of such a checkpoint to the form's weights by graph path
/// (ctr_model_values; a dynamic table's keys `embedding/keys` go to
/// `embedding/embeddings/keys`, a key a row as before); its other ints (step, epoch) are
/// kept. A variable missing or of another shape is an invalid_argument error naming it.
Expected<Checkpoint> migrate_ctr_checkpoint(const CtrModelConfig& config,
                                            const Checkpoint& checkpoint);

/// Troupe's built-in Fashion-MNIST classifiers: an MLP of `widths` (widths[0] = 784, any
/// width with `features`), or the tutorial's CNN.
struct ClassifierForm {
  bool cnn = false;
  std::vector<int64_t> widths = {784, 128, 10};  // an MLP's
  uint64_t seed = 1;
  /// The input as the programs read Fashion-MNIST (core::load_fashion_mnist): `features`
  /// [784], the pixels already scaled to [0, 1], so no Rescaling (and, for the MLP, no
  /// Flatten) in front; what ClassifierGraph trains. An MLP's `features` are widths[0]
  /// wide, whatever it is. Off: a file's form, below.
  bool features = false;
};

/// A classifier's Keras form: input `image` [28, 28] (the pixels, as `troupe train --format
/// idx` reads them) -> Rescaling(1/255) (what Troupe's IDX reader does for the programs;
/// ClassifierForm::features drops it) -> the MLP's Flatten and Dense layers `dense_0`.. (relu but
/// the last), or the CNN's Reshape(28, 28, 1), `conv2d` Conv2D(32, 3, relu), Flatten, `dense_0`
/// Dense(128, relu), `dense_1` Dense(10); the logits out, compiled with sparse categorical
/// cross-entropy from logits, accuracy and `optimizer` (as ctr_model_config's). Its graph
/// weight paths are the Sequential parameters' names ("dense_0/kernel", "conv2d/bias"). An
/// MLP whose input is not 784 wide is an invalid_argument error (but with `features`).
Expected<nlohmann::json> classifier_model_config(const ClassifierForm& form,
                                                 const std::string& optimizer = "",
                                                 float learning_rate = 0.0f);

/// Writes a classifier with the values `weights` (by parameter name: what
/// troupe::Model::read_weights() and its checkpoints hold) as a .keras file, atomically. A
/// missing parameter or a shape that differs is an invalid_argument error naming it.
Status write_classifier_keras(const std::string& path, const ClassifierForm& form,
                              const std::map<std::string, Tensor>& weights,
                              const std::string& optimizer = "", float learning_rate = 0.0f);

/// Writes an exported model (core/nn/ctr_export.hpp) as a .keras file that Keras and
/// `troupe predict` load, atomically. A dynamic table (rows by raw 64-bit key) has no
/// Keras form: an invalid_argument error saying so.
Status write_ctr_keras(const std::string& path, const CtrExport& model);

}  // namespace troupe::core::keras
