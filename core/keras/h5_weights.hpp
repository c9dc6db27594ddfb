#pragma once
// HDF5 weight files (Keras's model.weights.h5) read from and written to memory (libhdf5's
// core driver and file images behind this header): a model that travelled as bytes never
// touches the disk.
//
//   auto w = read_h5_weights(image, "m.keras: model.weights.h5");
//   w->datasets["layers/dense/vars/0"]   // float32 [in, out]
//   w->groups["layers/dense/vars"]       // "dense": the Keras object's name
//   auto again = write_h5_weights(w->datasets, w->groups, image, "out.keras: model.weights.h5");

#include <cstdint>
#include <map>
#include <string>

#include "core/expected.hpp"
#include "core/tensor.hpp"

namespace troupe::core::keras {

/// What an HDF5 weights file holds, by full path from its root (no leading '/').
struct H5Weights {
  /// Every dataset: floating ones as float32 (float16 and float64 converted), integer ones
  /// as int64, on the CPU.
  std::map<std::string, Tensor> datasets;
  /// Every group, with the string of its "name" attribute ("" where it has none). Keras
  /// names each saved object's "<path>/vars" group so: {"layers/dense_3/vars": "shared"}.
  std::map<std::string, std::string> groups;
};

/// What a reader accepts before it refuses a file as a bomb.
struct H5Limits {
  uint64_t max_dataset_bytes = uint64_t{2} << 30;  // one dataset, as float32 / int64
  uint64_t max_total_bytes = uint64_t{8} << 30;    // all datasets together
  uint64_t max_objects = 1000000;                  // groups and datasets
};

/// The groups and datasets of the HDF5 file image `image`. `name` names it in errors:
/// data_loss for bytes that are no HDF5 file or a damaged one, invalid_argument for a
/// dataset of a type or rank a Tensor cannot hold (strings, compounds, rank over 6, an
/// external or virtual dataset), out_of_range for one over the limits.
Expected<H5Weights> read_h5_weights(const std::string& image, const std::string& name,
                                    const H5Limits& limits = {});

/// An HDF5 file image holding `groups` (created with their parents, each with its "name"
/// attribute where one is given) and `datasets` (float32, int32 or int64 tensors on the
/// CPU, contiguous and uncompressed as h5py writes them; their parent groups are created
/// too). Where `original` (an image; may be empty) holds a dataset of the same path and
/// kind (floating or integer), its stored type is kept (a float16 or int32 one stays so).
Expected<std::string> write_h5_weights(const std::map<std::string, Tensor>& datasets,
                                       const std::map<std::string, std::string>& groups,
                                       const std::string& original, const std::string& name);

}  // namespace troupe::core::keras
