#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/record_io.hpp"  // frame_record, read_records
#include "core/expected.hpp"

namespace troupe::core {

/// Writes TensorBoard event files: `events.out.tfevents.<secs>.<host>.<pid>.<n>` in a
/// directory, a sequence of records (little-endian u64 length, masked CRC32C of the length,
/// the bytes, masked CRC32C of the bytes), each an `Event` protocol buffer. The first event
/// names the file version ("brain.Event:2"); each scalar is an event with wall time, step
/// and a `Summary` holding one `simple_value`. Every event is flushed as it is written, so
/// TensorBoard and scripts see it at once.
///
///   EventFileWriter w("/tmp/logs/train");  // opened on the first write
///   w.add_scalar("epoch_loss", 0.41f, 1);
class EventFileWriter {
 public:
  explicit EventFileWriter(std::string directory);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  /// Creates the directory and the file if not yet open; errors name the path.
  Status add_scalar(std::string_view tag, float value, int64_t step);
  /// Appends a whole event record (an encoded `Event`).
  Status write_event(const std::string& event_bytes);

  const std::string& directory() const { return directory_; }
  /// The file being written; empty before the first write.
  const std::string& path() const { return path_; }

 private:
  Status open();
  std::string directory_;
  std::string path_;
  std::FILE* file_ = nullptr;
};

/// The parts of TensorBoard's protocol buffers the writer uses, encoded by hand (field
/// numbers from tensorflow/core/util/event.proto and framework/summary.proto).
namespace event_proto {
/// Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 (string)}.
std::string file_version_event(double wall_time, std::string_view version);
/// Event{wall_time = 1, step = 2, summary = 5: Summary{value = 1: Value{tag = 1 (string),
/// simple_value = 2 (float)}}}.
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);
}  // namespace event_proto

}  // namespace troupe::core
