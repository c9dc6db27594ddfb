#pragma once

// Keras's layers, one file each under core/layers/, each made from its Keras config by a
// factory registered under its Keras class name in core/layers/registry.cpp (the one list
// of them). A layer's entry there says everything the model reader needs to know of it
// (what its inputs are, the assets it reads), so that nothing outside its file and its
// entry knows a layer by name.
//
//   auto dense = layers::make_layer("Dense", config_json);   // or an error naming what
//                                                            // Troupe does not support

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/expected.hpp"
#include "core/graph/layer_config.hpp"
#include "core/graph/operation.hpp"

namespace troupe::core::layers {

// The graph's vocabulary, which every layer speaks.
using graph::as_rows;
using graph::Call;
using graph::CallState;
using graph::kind_name;
using graph::LayerConfig;
using graph::Ref;
using graph::TensorSpec;
using graph::Weight;

using LayerFactory = Expected<std::unique_ptr<graph::Operation>> (*)(LayerConfig&);

/// A layer class's registry entry (core/layers/registry.cpp).
struct LayerEntry {
  const char* class_name;
  LayerFactory make;
  /// Its inputs are integer ids: a float Input feeding it is read as ids (Keras casts).
  bool reads_ids = false;
  /// Its outputs are integer ids: Keras gives it an int dtype policy.
  bool makes_ids = false;
  /// An asset of the .keras file it reads when its config leaves `asset_key` null: the
  /// file `asset_file` in the layer's own folder of the archive (a lookup's vocabulary).
  const char* asset_key = nullptr;
  const char* asset_file = nullptr;
};

/// The entry of Keras class `class_name` (or of a registered custom class: "troupe>FM", the
/// part after '>' when the whole name is not known); null when Troupe has none.
const LayerEntry* find_layer(const std::string& class_name);

/// The layer of Keras class `class_name` from its config. An unknown class, or an argument
/// or dtype Troupe does not support, is an invalid_argument error naming the layer, its
/// class and the argument. `assets`: the .keras file's other entries.
Expected<std::unique_ptr<graph::Operation>> make_layer(
    const std::string& class_name, const nlohmann::json& config,
    const std::map<std::string, std::string>* assets = nullptr);
/// The class names make_layer knows, sorted.
std::vector<std::string> layer_classes();

/// For the element-wise merges (Add, Subtract, Multiply, Average, Maximum, Minimum): every
/// input a float tensor of the first one's shape (Multiply's one broadcast aside), or an error
/// naming the layer and the shapes it got (core/layers/merge.cpp).
Status same_float_inputs(const graph::Operation& layer, const std::vector<TensorSpec>& in);

}  // namespace troupe::core::layers
