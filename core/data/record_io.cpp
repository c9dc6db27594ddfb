#include "core/data/record_io.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/checkpoint/crc32c.hpp"
#include "core/proto_wire.hpp"

namespace troupe::core {

std::string record_source_name(const std::string& path) {
  return path == "-" ? std::string("standard input") : path;
}

namespace {

uint32_t masked_crc(const void* p, size_t n) {
  return mask_crc32c(crc32c(p, n));
}

// Opens `path` ("-": standard input) for reading. A regular file's size goes to *size; a
// stream (a pipe, a FIFO, a terminal, a socket) has none: *size is nullopt and its records are
// read as they arrive, with no seek. A directory is refused.
Expected<detail::FilePtr> open_file(const std::string& path, std::optional<uint64_t>* size) {
  detail::FilePtr f;
  if (path == "-") {
    const int fd = ::dup(STDIN_FILENO);  // closing the reader leaves standard input open
    if (fd >= 0) f.reset(::fdopen(fd, "rb"));
    if (!f) {
      if (fd >= 0) ::close(fd);
      return make_error(Errc::io_error, std::string("standard input: cannot read (") +
                                            std::strerror(errno ? errno : EIO) + ")");
    }
  } else {
    f.reset(std::fopen(path.c_str(), "rb"));
    if (!f)
      return make_error(errno == ENOENT ? Errc::not_found : Errc::io_error,
                        path + ": cannot open (" + std::strerror(errno ? errno : EIO) + ")");
  }
  struct stat st {};
  if (::fstat(::fileno(f.get()), &st) != 0 || S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode))
    return make_error(Errc::io_error, record_source_name(path) + ": not a file or a stream");
  if (size != nullptr)
    *size = S_ISREG(st.st_mode) ? std::optional<uint64_t>(static_cast<uint64_t>(st.st_size))
                                : std::nullopt;
  return f;
}

}  // namespace

std::string RawRecord::where() const {
  const std::string name = file ? *file : std::string("<memory>");
  return (is_line ? name + ":" + std::to_string(index)
                  : name + ": record " + std::to_string(index)) +
         " at offset " + std::to_string(offset);
}

Expected<TFRecordReader> TFRecordReader::open(const std::string& path, uint64_t max_record_bytes) {
  TFRecordReader r;
  auto f = open_file(path, &r.size_);
  if (!f) return f.error();
  r.file_ = std::move(*f);
  r.path_ = std::make_shared<const std::string>(record_source_name(path));
  r.max_record_bytes_ = max_record_bytes;
  return r;
}

Error TFRecordReader::damaged(const std::string& what) const {
  return make_error(Errc::data_loss, *path_ + ": record " + std::to_string(index_) + " at byte " +
                                         std::to_string(offset_) + ": " + what);
}

Expected<std::optional<uint64_t>> TFRecordReader::header() {
  char header[12];
  const size_t got = std::fread(header, 1, sizeof header, file_.get());
  if (got == 0 && std::feof(file_.get())) return std::optional<uint64_t>();
  if (got < sizeof header) return damaged("truncated header");
  uint64_t len;
  uint32_t len_crc;
  std::memcpy(&len, header, 8);
  std::memcpy(&len_crc, header + 8, 4);
  if (masked_crc(header, 8) != len_crc) return damaged("length CRC mismatch");
  if (len > max_record_bytes_)
    return damaged("length " + std::to_string(len) + " over the limit of " +
                   std::to_string(max_record_bytes_) + " bytes");
  if (size_) {  // a file's size bounds the record before anything is allocated for it
    const uint64_t left = *size_ - std::min(*size_, offset_ + 12);
    if (len > left || left - len < 4) return damaged("truncated data");
  }
  return std::optional<uint64_t>(len);
}

Expected<bool> TFRecordReader::next(RawRecord& out) {
  auto len = header();
  if (!len) return len.error();
  if (!*len) return false;
  out.data.resize(**len);
  uint32_t data_crc = 0;
  if (std::fread(out.data.data(), 1, **len, file_.get()) != **len ||
      std::fread(&data_crc, 1, 4, file_.get()) != 4)
    return damaged("truncated data");
  if (masked_crc(out.data.data(), **len) != data_crc) return damaged("data CRC mismatch");
  out.file = path_;
  out.index = index_++;
  out.is_line = false;
  out.offset = static_cast<int64_t>(offset_);
  offset_ += 12 + **len + 4;
  return true;
}

Expected<bool> TFRecordReader::skip() {
  auto len = header();
  if (!len) return len.error();
  if (!*len) return false;
  // The data and its CRC read past through the stream's buffer (an fseeko per record is a
  // system call each: slower than the copy).
  const uint64_t rest = **len + 4;
  char sink[4096];
  for (uint64_t left = rest; left > 0;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, sizeof sink));
    if (std::fread(sink, 1, want, file_.get()) != want) return damaged("truncated data");
    left -= want;
  }
  ++index_;
  offset_ += 12 + rest;
  return true;
}

Expected<LineReader> LineReader::open(const std::string& path, size_t max_line_bytes) {
  LineReader r;
  auto f = open_file(path, nullptr);
  if (!f) return f.error();
  r.file_ = std::move(*f);
  r.path_ = std::make_shared<const std::string>(record_source_name(path));
  r.max_line_ = max_line_bytes;
  r.buf_.resize(std::min<size_t>(max_line_bytes + 1, 64 << 10));
  return r;
}

Expected<bool> LineReader::next(RawRecord& out) {
  size_t scanned = begin_;
  for (;;) {
    const char* base = buf_.data();
    const void* nl = std::memchr(base + scanned, '\n', end_ - scanned);
    if (nl != nullptr || (eof_ && begin_ < end_)) {
      const size_t stop =
          nl != nullptr ? static_cast<size_t>(static_cast<const char*>(nl) - base) : end_;
      if (stop - begin_ > max_line_) break;  // the error below
      size_t len = stop - begin_;
      if (len > 0 && base[begin_ + len - 1] == '\r') --len;
      out.data.assign(base + begin_, len);
      out.file = path_;
      out.index = ++line_;
      out.is_line = true;
      out.offset = static_cast<int64_t>(offset_);
      const size_t consumed = (nl != nullptr ? stop + 1 : stop) - begin_;
      begin_ += consumed;
      offset_ += consumed;
      return true;
    }
    if (eof_) return false;
    if (end_ - begin_ > max_line_) break;
    // Keep the unread bytes, make room, read more.
    std::memmove(buf_.data(), base + begin_, end_ - begin_);
    end_ -= begin_;
    scanned = end_;
    begin_ = 0;
    if (end_ == buf_.size()) buf_.resize(std::min(buf_.size() * 2, max_line_ + 2));
    // read(2), not fread: on a stream, a line is returned as soon as it has arrived rather
    // than once the buffer is full.
    ssize_t n;
    do {
      n = ::read(::fileno(file_.get()), buf_.data() + end_, buf_.size() - end_);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
      return make_error(Errc::io_error, *path_ + ": read failed at byte " +
                                            std::to_string(offset_ + (end_ - begin_)) + " (" +
                                            std::strerror(errno) + ")");
    if (n == 0) eof_ = true;
    end_ += static_cast<size_t>(n);
  }
  return make_error(Errc::data_loss, *path_ + ":" + std::to_string(line_ + 1) +
                                         ": line longer than " + std::to_string(max_line_) +
                                         " bytes at offset " + std::to_string(offset_));
}

std::string frame_record(std::string_view data) {
  std::string r;
  r.reserve(data.size() + 16);
  proto::put_le<uint64_t>(r, data.size());
  proto::put_le<uint32_t>(r, masked_crc(r.data(), 8));
  r.append(data);
  proto::put_le<uint32_t>(r, masked_crc(data.data(), data.size()));
  return r;
}

Expected<std::vector<std::string>> read_records(const std::string& path) {
  auto reader = TFRecordReader::open(path);
  if (!reader) return reader.error();
  std::vector<std::string> out;
  RawRecord r;
  for (;;) {
    auto more = reader->next(r);
    if (!more) return more.error();
    if (!*more) return out;
    out.push_back(std::move(r.data));
  }
}

}  // namespace troupe::core
