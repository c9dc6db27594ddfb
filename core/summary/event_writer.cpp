#include "core/summary/event_writer.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/checkpoint/crc32c.hpp"
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

uint32_t masked_crc(const void* p, size_t n) {
  return mask_crc32c(crc32c(p, n));
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

std::string frame_record(std::string_view data) {
  std::string r;
  r.reserve(data.size() + 16);
  put_le<uint64_t>(r, data.size());
  put_le<uint32_t>(r, masked_crc(r.data(), 8));
  r.append(data);
  put_le<uint32_t>(r, masked_crc(data.data(), data.size()));
  return r;
}

Expected<std::vector<std::string>> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::not_found, path + ": cannot open");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t off = 0;
  auto damaged = [&](const std::string& what) {
    return make_error(Errc::data_loss, path + ": record " + std::to_string(out.size()) +
                                           " at byte " + std::to_string(off) + ": " + what);
  };
  while (off < bytes.size()) {
    if (bytes.size() - off < 12) return damaged("truncated header");
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, bytes.data() + off, 8);
    std::memcpy(&len_crc, bytes.data() + off + 8, 4);
    if (masked_crc(bytes.data() + off, 8) != len_crc) return damaged("length CRC mismatch");
    if (len > bytes.size() - off - 12 || bytes.size() - off - 12 - len < 4)
      return damaged("truncated data");  // (a length near 2^64 must not wrap around)
    const char* data = bytes.data() + off + 12;
    uint32_t data_crc;
    std::memcpy(&data_crc, data + len, 4);
    if (masked_crc(data, len) != data_crc) return damaged("data CRC mismatch");
    out.emplace_back(data, len);
    off += 12 + len + 4;
  }
  return out;
}

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
