#pragma once
// Keras 3 `.keras` files: a zip of config.json (the model), metadata.json and
// model.weights.h5 (the variables, by the path Keras saved them at), plus assets. This
// reads and writes the files only; what the config means is the model builder's.
//
//   auto f = keras::read_keras("model.keras");
//   if (!f) return f.error();               // "model.keras: no config.json: ..."
//   f->config["class_name"]                 // "Sequential", "Functional"
//   f->weights["layers/dense/vars/0"]       // the first Dense layer's kernel [in, out]
//   f->weights["layers/dense/vars/0"][0] = 1.0f;
//   auto s = keras::write_keras("changed.keras", *f);   // keras.saving.load_model reads it

#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/expected.hpp"
#include "core/keras/h5_weights.hpp"
#include "core/keras/zip_archive.hpp"
#include "core/tensor.hpp"

namespace troupe::core::keras {

/// What a Keras 3 .keras file holds.
struct KerasFile {
  /// config.json: the model (module, class_name, config, build_config, compile_config).
  nlohmann::json config;
  /// metadata.json (keras_version, date_saved); an empty object where the file has none.
  nlohmann::json metadata = nlohmann::json::object();
  /// model.weights.h5's datasets by their full HDF5 path ("layers/dense/vars/0",
  /// "optimizer/vars/3"): float32 tensors (float64 and float16 converted), integer ones
  /// as DType::int64 tensors. Keras numbers each object's variables 0, 1, ... (as strings:
  /// "10" sorts before "2" here).
  std::map<std::string, Tensor> weights;
  /// model.weights.h5's groups, each with its "name" attribute ("" where none): Keras gives
  /// each saved object a "<path>/vars" group named after the object, {"layers/dense_3/vars":
  /// "shared"}, even an object without variables. The writer creates every one of them.
  std::map<std::string, std::string> weight_groups;
  /// Everything else in the zip (assets/..., a StringLookup's vocabulary), path -> bytes.
  std::map<std::string, std::string> assets;
  /// The model.weights.h5 bytes as read: the writer keeps the stored type of each dataset
  /// found here (a float16 or int32 one stays so). Null for a file made from scratch.
  /// Shared, never changed: a copy of a KerasFile (a model's file written back with new
  /// weights) does not copy the whole weights file again.
  std::shared_ptr<const std::string> weights_h5;
};

/// What a reader accepts before it refuses a file as a bomb or a lie.
struct KerasLimits {
  uint64_t max_file_bytes = uint64_t{8} << 30;  // the .keras file itself
  ZipLimits zip;
  H5Limits h5;
};

/// Reads a .keras file. Errors name the file and the part at fault: not_found / io_error
/// for the file, data_loss for damage ("m.keras: not a zip archive", "m.keras:
/// config.json: not JSON: ...", "m.keras: model.weights.h5: dataset layers/dense/vars/0:
/// ..."), invalid_argument for a zip that is no Keras file ("m.keras: no config.json"),
/// out_of_range for an entry or dataset over `limits`.
Expected<KerasFile> read_keras(const std::string& path, const KerasLimits& limits = {});
/// The same from the file's bytes; `name` stands for the file in errors.
Expected<KerasFile> read_keras_bytes(const std::string& bytes, const std::string& name,
                                     const KerasLimits& limits = {});

/// The JSON of model.to_json() (Keras 3, and tf_keras 2 / Keras 2 forms), parsed and
/// checked to be a model description (an object with class_name and config).
Expected<nlohmann::json> read_model_json(const std::string& path);

/// The bytes of a .keras file holding `file`: metadata.json, config.json, model.weights.h5
/// (file.weights under file.weight_groups, see write_h5_weights) and the assets, stored
/// uncompressed as Keras does. `name` stands for the file in errors.
Expected<std::string> write_keras_bytes(const KerasFile& file, const std::string& name);
/// Writes a .keras file keras.saving.load_model loads. Atomic: written to a temporary file
/// in the same directory, fsync'd and renamed over `path`; a failure leaves an existing
/// file untouched.
Status write_keras(const std::string& path, const KerasFile& file);

}  // namespace troupe::core::keras
