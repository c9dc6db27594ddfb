#pragma once
// Zip archives in memory (libzip behind this header): how a Keras 3 `.keras` file is packed.
//
//   auto entries = read_zip(bytes, "model.keras");        // name -> bytes, archive order
//   auto packed = write_zip(*entries, "model.keras");     // stored entries, as Keras writes

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/expected.hpp"

namespace troupe::core::keras {

/// What a reader accepts before it refuses an archive as a bomb or a lie.
struct ZipLimits {
  uint64_t max_entry_bytes = uint64_t{2} << 30;  // one entry, uncompressed
  uint64_t max_total_bytes = uint64_t{8} << 30;  // all entries together, uncompressed
  uint64_t max_entries = 100000;
};

struct ZipEntry {
  std::string name;  // the path inside the archive ("assets/vocabulary.txt")
  std::string bytes;
};

/// The file entries of the zip archive held in `bytes` (directories left out), in the
/// archive's order. `name` names the archive in errors: data_loss for a damaged or
/// truncated archive (a CRC mismatch included), out_of_range for an entry over the limits,
/// invalid_argument for an encrypted one.
Expected<std::vector<ZipEntry>> read_zip(const std::string& bytes, const std::string& name,
                                         const ZipLimits& limits = {});

/// A zip archive of `entries`, in that order, stored uncompressed (as Keras's own writer
/// does) with a fixed modification time, so that equal entries give equal bytes.
Expected<std::string> write_zip(const std::vector<ZipEntry>& entries, const std::string& name);
/// The same archive given to `sink` piece by piece (a file written as it is made, with no
/// copy of the whole archive in a string); the sink's first error ends it.
Status write_zip(const std::vector<ZipEntry>& entries, const std::string& name,
                 const std::function<Status(const char* data, size_t n)>& sink);

}  // namespace troupe::core::keras
