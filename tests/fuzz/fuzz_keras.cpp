// Keras .keras files (core/keras/keras_file.hpp): the zip, the JSON in it and the HDF5
// weights file inside; whatever reads is written again. Limits small enough that a valid
// file describing a big model is refused rather than allocated.
//
// The HDF5 image is only reached intact (its CRC in the zip must match), so libhdf5's own
// parser is not what this fuzzes: HDF5 1.10 hangs within seconds on mutated images (in
// H5HG reads of variable-length attributes), a library bug no check of ours prevents.
#include "core/keras/keras_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe::core::keras;
  KerasLimits limits;
  limits.zip.max_entry_bytes = 1 << 20;
  limits.zip.max_total_bytes = 4 << 20;
  limits.zip.max_entries = 256;
  limits.h5.max_dataset_bytes = 1 << 20;
  limits.h5.max_total_bytes = 4 << 20;
  limits.h5.max_objects = 4096;
  auto f = read_keras_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz.keras",
                            limits);
  if (f) (void)write_keras_bytes(*f, "fuzz.keras");
  return 0;
}
