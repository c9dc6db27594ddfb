#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/example.hpp"
#include "core/expected.hpp"

namespace troupe::core {

/// An IDX array of unsigned bytes (the MNIST family's format), gzip'ed or not.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

/// Reads an unsigned-byte IDX file. A missing file is not_found; a bad header, a truncated
/// payload or a corrupt gzip stream is data_loss, naming the file and the byte offset (in
/// the uncompressed stream) where it went wrong.
Expected<IdxArray> read_idx(const std::string& path);

/// Where Debian's dataset-fashion-mnist package puts the files.
inline const char* const fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

/// A Fashion-MNIST split ("train" or "t10k") as examples: 784 features scaled to [0, 1],
/// the class as label. Image and label counts must agree.
/// Fashion-MNIST images are this many pixels on each side; other shapes are refused.
inline constexpr int64_t fashion_mnist_side = 28;

Expected<std::vector<Example>> load_fashion_mnist(const std::string& dir, const std::string& split);

}  // namespace troupe::core
