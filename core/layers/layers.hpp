#pragma once

// The layers a layer graph is made of, one file each under core/layers/, each made from
// its Keras config by a factory registered under its Keras class name in
// core/layers/registry.cpp (the one list of them).
//
//   auto layer = graph::make_layer("Dense", config_json);   // or an error naming what
//                                                          // Troupe does not support

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/expected.hpp"
#include "core/graph/layer.hpp"
#include "core/graph/layer_config.hpp"

namespace troupe::core::graph {

using LayerFactory = Expected<std::unique_ptr<Layer>> (*)(LayerConfig&);

/// The layer of Keras class `class_name` (or a registered custom class: "troupe>FM", the
/// part after '>' when the whole name is not known) from its config. An unknown class, or
/// an argument or dtype Troupe does not support, is an invalid_argument error naming the
/// layer, its class and the argument. `assets`: the .keras file's other entries.
Expected<std::unique_ptr<Layer>> make_layer(
    const std::string& class_name, const nlohmann::json& config,
    const std::map<std::string, std::string>* assets = nullptr);
/// The class names make_layer knows, sorted.
std::vector<std::string> layer_classes();

/// For the element-wise merges (Add, Subtract, Multiply, Average, Maximum, Minimum): every
/// input a float tensor of the first one's shape (Multiply's one broadcast aside), or an error
/// naming the layer and the shapes it got (core/layers/merge.cpp).
Status same_float_inputs(const Layer& layer, const std::vector<TensorSpec>& in);

// The factories (core/layers/<name>.cpp).
Expected<std::unique_ptr<Layer>> make_dense(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_activation(LayerConfig& c);
// layer graph: basic
Expected<std::unique_ptr<Layer>> make_flatten(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_reshape(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_identity(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_concatenate(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_add(LayerConfig& c);  // merge.cpp
Expected<std::unique_ptr<Layer>> make_subtract(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_multiply(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_average(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_maximum(LayerConfig& c);  // merge_extremum.cpp
Expected<std::unique_ptr<Layer>> make_minimum(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_dot(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_dropout(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_batch_normalization(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_layer_normalization(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_global_average_pooling1d(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_global_max_pooling1d(LayerConfig& c);  // global_pooling1d.cpp
Expected<std::unique_ptr<Layer>> make_rescaling(LayerConfig& c);
// layer graph: sparse
Expected<std::unique_ptr<Layer>> make_conv2d(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_max_pooling2d(LayerConfig& c);  // pooling2d.cpp
Expected<std::unique_ptr<Layer>> make_average_pooling2d(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_global_average_pooling2d(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_embedding(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_hashing(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_integer_lookup(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_string_lookup(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_cross(LayerConfig& c);
Expected<std::unique_ptr<Layer>> make_factorization_machine(LayerConfig& c);

}  // namespace troupe::core::graph
