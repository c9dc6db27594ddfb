#pragma once

// Streaming readers of record files: TensorFlow's record format (TFRecord: length, masked
// CRC32C of the length, data, masked CRC32C of the data) and text lines. Each holds one
// record in memory, never the file; every length read from the file is checked against a
// limit and, for a regular file, against the bytes the file has before anything is
// allocated for it.
//
// A source is a regular file, or a stream read front to back with no seek and no size: a
// named pipe (FIFO), a terminal, a socket, or standard input (the path "-"). A stream that
// ends inside a record is a truncated record, as a file is.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/expected.hpp"

namespace troupe::core {

/// How errors name a source: the path, or "standard input" for "-".
std::string record_source_name(const std::string& path);

/// One record as read, with where it came from for error messages.
struct RawRecord {
  std::string data;
  std::shared_ptr<const std::string> file;
  int64_t index = 0;   // lines: the 1-based line number; TFRecord: the 0-based record number
  int64_t offset = 0;  // the byte offset of the record (or line) in the file
  bool is_line = false;

  /// "file:LINE at offset K" or "file: record N at offset K": the start of an error about it.
  std::string where() const;
};

namespace detail {
struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;
}  // namespace detail

/// Reads the records of a TFRecord file one at a time.
class TFRecordReader {
 public:
  /// A record announcing more than `max_record_bytes` is a data_loss error (not an
  /// allocation of that size).
  static Expected<TFRecordReader> open(const std::string& path,
                                       uint64_t max_record_bytes = uint64_t{64} << 20);
  /// The next record into `out`; false at the end of the file. A truncated record or a CRC
  /// mismatch is a data_loss error naming the file, the record and its byte offset.
  Expected<bool> next(RawRecord& out);
  /// Passes over the next record without reading its data: its header is checked (length,
  /// length CRC, and that the file holds the data) but not its data's CRC. What a reader
  /// of every n-th record does with the others, which another reader reads and checks.
  /// False at the end of the file; errors as next().
  Expected<bool> skip();

 private:
  /// The next record's header: its data's length; nullopt at the end of the file.
  Expected<std::optional<uint64_t>> header();
  Error damaged(const std::string& what) const;

  detail::FilePtr file_;
  std::shared_ptr<const std::string> path_;
  uint64_t max_record_bytes_ = 0;
  std::optional<uint64_t> size_;  // of a regular file when opened; none for a stream
  uint64_t offset_ = 0;
  int64_t index_ = 0;
};

/// Reads the lines of a text file one at a time ('\n' ends a line; a '\r' before it is
/// dropped; the last line needs no '\n').
class LineReader {
 public:
  /// A line longer than `max_line_bytes` is a data_loss error naming the file and line.
  static Expected<LineReader> open(const std::string& path, size_t max_line_bytes = 1 << 20);
  Expected<bool> next(RawRecord& out);

 private:
  detail::FilePtr file_;
  std::shared_ptr<const std::string> path_;
  size_t max_line_ = 0;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;  // unread bytes in buf_
  uint64_t offset_ = 0;         // file offset of buf_[begin_]
  int64_t line_ = 0;
  bool eof_ = false;
};

/// One record of TensorFlow's record format around `data`.
std::string frame_record(std::string_view data);

/// The payloads of every record in a record file, in order (for small files: event files,
/// tests). Errors as TFRecordReader's.
Expected<std::vector<std::string>> read_records(const std::string& path);

}  // namespace troupe::core
