#include "core/summary/event_writer.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/proto_wire.hpp"

namespace troupe::core {

namespace {

using proto::put_bytes;
using proto::put_key;
using proto::put_le;
using proto::put_varint;

void put_double(std::string& out, uint32_t field, double v) {
  put_key(out, field, proto::fixed64);
  put_le(out, v);
}
void put_float(std::string& out, uint32_t field, float v) {
  put_key(out, field, proto::fixed32);
  put_le(out, v);
}
void put_int64(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, proto::varint);
  put_varint(out, static_cast<uint64_t>(v));
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

namespace event_proto {

std::string file_version_event(double wall_time, std::string_view version) {
  std::string e;
  put_double(e, 1, wall_time);
  put_int64(e, 2, 0);
  put_bytes(e, 3, version);
  return e;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  put_bytes(v, 1, tag);
  put_float(v, 2, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e;
  put_double(e, 1, wall_time);
  put_int64(e, 2, step);
  put_bytes(e, 5, summary);
  return e;
}

}  // namespace event_proto

EventFileWriter::EventFileWriter(std::string directory) : directory_(std::move(directory)) {}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status EventFileWriter::open() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (ec) return make_error(Errc::io_error, directory_ + ": " + ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const auto secs = static_cast<int64_t>(now_seconds());
  // A writer opened in the same second by the same process gets the next free number.
  for (int n = 0;; ++n) {
    std::string p = directory_ + "/events.out.tfevents." + std::to_string(secs) + "." + host + "." +
                    std::to_string(::getpid()) + "." + std::to_string(n);
    if (fs::exists(p, ec)) continue;
    file_ = std::fopen(p.c_str(), "wbx");
    if (file_ == nullptr) {
      if (errno == EEXIST) continue;
      return make_error(Errc::io_error, p + ": " + std::strerror(errno));
    }
    path_ = std::move(p);
    break;
  }
  return write_event(event_proto::file_version_event(now_seconds(), "brain.Event:2"));
}

Status EventFileWriter::write_event(const std::string& event_bytes) {
  if (file_ == nullptr)
    if (auto st = open(); !st) return st;
  const std::string r = frame_record(event_bytes);
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size() || std::fflush(file_) != 0)
    return make_error(Errc::io_error, path_ + ": write failed: " + std::strerror(errno));
  return {};
}

Status EventFileWriter::add_scalar(std::string_view tag, float value, int64_t step) {
  return write_event(event_proto::scalar_event(now_seconds(), step, tag, value));
}

}  // namespace troupe::core
