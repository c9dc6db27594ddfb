#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

/// Named tensors (variables, optimizer slots) and named integer vectors (step, epoch,
/// optimizer iteration counts) saved together.
struct Checkpoint {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::vector<int64_t>> ints;
};

/// A short text (an optimizer's name) as checkpoint ints, one per byte, and back; bytes
/// outside printable ASCII read back as nothing.
std::vector<int64_t> text_ints(const std::string& text);
std::optional<std::string> ints_text(const std::vector<int64_t>& ints);

/// The file format's version; readers refuse other versions with a clear error.
inline constexpr uint32_t checkpoint_format_version = 1;

/// Writes `ckpt` to `path` atomically: a temporary file in the same directory, fsynced,
/// renamed over `path`, and the directory fsynced. On any error the temporary file is
/// removed and an existing file at `path` is untouched.
Status write_checkpoint(const std::string& path, const Checkpoint& ckpt);

/// Removes the temporary files that write_checkpoint left in `directory` when its writer
/// was killed mid-write (`<file>.tmp-<pid>-<n>`, their writer no longer running). A write
/// in progress, its process alive, is left alone; so is every other file. Returns how many
/// it removed. (A writer in another pid namespace looks gone: one directory has one writer.)
int remove_abandoned_writes(const std::string& directory);

/// Reads a checkpoint. A missing file is not_found; a wrong magic or version, a record
/// whose CRC32C does not match, a truncated file or trailing bytes are data_loss errors
/// naming the file, the record and the byte offset.
Expected<Checkpoint> read_checkpoint(const std::string& path);

}  // namespace troupe::core
