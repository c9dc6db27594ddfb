#include "core/checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>

#include "core/checkpoint/crc32c.hpp"

// File layout (little-endian):
//   header  "TRPCKPT1" | u32 version | u32 record count | u32 crc32c(previous 16 bytes)
//   record  u32 name length | name | u8 kind (1 float32, 2 int64) | u8 rank | i64 dims[rank]
//           | u64 payload bytes | payload | u32 crc32c(everything of the record before it)
// Nothing follows the last record.

namespace troupe::core {

namespace {

constexpr char magic[8] = {'T', 'R', 'P', 'C', 'K', 'P', 'T', '1'};
constexpr uint8_t kind_float32 = 1;
constexpr uint8_t kind_int64 = 2;
constexpr uint32_t max_name_length = 4096;

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

std::string os_error() {
  return std::strerror(errno ? errno : EIO);
}

class Writer {
 public:
  explicit Writer(FILE* f) : f_(f) {}
  void put(const void* p, size_t n) {
    if (ok_ && n > 0 && std::fwrite(p, 1, n, f_) != n) ok_ = false;
    crc_ = crc32c_extend(crc_, p, n);
  }
  template <class T>
  void put_value(T v) {
    put(&v, sizeof v);
  }
  void begin_record() { crc_ = 0; }
  void end_record() {
    const uint32_t c = crc_;
    put_value(c);
  }
  bool ok() const { return ok_; }

 private:
  FILE* f_;
  uint32_t crc_ = 0;
  bool ok_ = true;
};

void put_header(Writer& w, uint32_t count) {
  w.begin_record();
  w.put(magic, sizeof magic);
  w.put_value(checkpoint_format_version);
  w.put_value(count);
  w.end_record();
}

void put_record(Writer& w, const std::string& name, uint8_t kind, const Shape& shape,
                const void* payload, uint64_t bytes) {
  w.begin_record();
  w.put_value(static_cast<uint32_t>(name.size()));
  w.put(name.data(), name.size());
  w.put_value(kind);
  w.put_value(static_cast<uint8_t>(shape.rank()));
  for (int i = 0; i < shape.rank(); ++i)
    w.put_value(static_cast<int64_t>(shape[i]));
  w.put_value(bytes);
  w.put(payload, bytes);
  w.end_record();
}

Status fsync_directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return make_error(Errc::io_error, dir + ": cannot open directory (" + os_error() + ")");
  const int r = ::fsync(fd);
  ::close(fd);
  if (r != 0) return make_error(Errc::io_error, dir + ": fsync failed (" + os_error() + ")");
  return {};
}

class Reader {
 public:
  Reader(FILE* f, std::string path, int64_t size) : f_(f), path_(std::move(path)), size_(size) {}

  int64_t offset() const { return offset_; }
  int64_t remaining() const { return size_ - offset_; }
  const std::string& path() const { return path_; }
  void begin_record() { crc_ = 0; }
  uint32_t crc() const { return crc_; }

  Status get(void* p, size_t n, const std::string& what) {
    if (static_cast<int64_t>(n) > remaining())
      return error("truncated: " + what + " needs " + std::to_string(n) + " bytes, the file ends");
    if (n > 0 && std::fread(p, 1, n, f_) != n)
      return make_error(Errc::io_error, path_ + ": read failed at offset " +
                                            std::to_string(offset_) + " (" + os_error() + ")");
    crc_ = crc32c_extend(crc_, p, n);
    offset_ += static_cast<int64_t>(n);
    return {};
  }
  template <class T>
  Status get_value(T& v, const std::string& what) {
    return get(&v, sizeof v, what);
  }

  Error error(const std::string& what) const {
    return make_error(Errc::data_loss,
                      path_ + ": " + what + " at offset " + std::to_string(offset_));
  }

 private:
  FILE* f_;
  std::string path_;
  int64_t size_;
  int64_t offset_ = 0;
  uint32_t crc_ = 0;
};

Status check_crc(Reader& r, const std::string& what) {
  const uint32_t expected = r.crc();
  uint32_t stored = 0;
  const int64_t at = r.offset();
  if (auto st = r.get_value(stored, "the CRC of " + what); !st) return st;
  if (stored != expected)
    return make_error(Errc::data_loss, r.path() + ": CRC32C mismatch in " + what +
                                           " (stored at offset " + std::to_string(at) + ")");
  return {};
}

Status read_record(Reader& r, uint32_t index, Checkpoint& out) {
  const std::string rec = "record " + std::to_string(index);
  r.begin_record();
  uint32_t name_len = 0;
  if (auto st = r.get_value(name_len, rec + " name length"); !st) return st;
  if (name_len > max_name_length || name_len > r.remaining())
    return r.error(rec + ": implausible name length " + std::to_string(name_len));
  std::string name(name_len, '\0');
  if (auto st = r.get(name.data(), name_len, rec + " name"); !st) return st;
  const std::string what = rec + " ('" + name + "')";
  uint8_t kind = 0, rank = 0;
  if (auto st = r.get_value(kind, what + " kind"); !st) return st;
  if (auto st = r.get_value(rank, what + " rank"); !st) return st;
  if (kind != kind_float32 && kind != kind_int64)
    return r.error(what + ": unknown kind " + std::to_string(kind));
  if (rank > Shape::max_rank)
    return r.error(what + ": rank " + std::to_string(rank) + " too large");
  std::vector<int64_t> dims(rank);
  int64_t elements = 1;
  for (auto& d : dims) {
    if (auto st = r.get_value(d, what + " shape"); !st) return st;
    if (d < 0 || (d > 0 && elements > r.remaining() / d))
      return r.error(what + ": implausible dimension " + std::to_string(d));
    elements *= d;
  }
  uint64_t bytes = 0;
  if (auto st = r.get_value(bytes, what + " payload size"); !st) return st;
  const uint64_t elem_size = kind == kind_float32 ? sizeof(float) : sizeof(int64_t);
  if (bytes != static_cast<uint64_t>(elements) * elem_size)
    return r.error(what + ": payload of " + std::to_string(bytes) + " bytes for shape of " +
                   std::to_string(elements) + " elements");
  if (static_cast<int64_t>(bytes) > r.remaining())
    return r.error("truncated: " + what + " payload needs " + std::to_string(bytes) +
                   " bytes, the file ends");
  if (kind == kind_float32) {
    Tensor t{Shape(dims)};
    if (auto st = r.get(t.data(), bytes, what + " payload"); !st) return st;
    if (auto st = check_crc(r, what); !st) return st;
    out.tensors[name] = std::move(t);
  } else {
    std::vector<int64_t> v(static_cast<size_t>(elements));
    if (auto st = r.get(v.data(), bytes, what + " payload"); !st) return st;
    if (auto st = check_crc(r, what); !st) return st;
    out.ints[name] = std::move(v);
  }
  return {};
}

}  // namespace

namespace {

// A write in progress is `<path><temp_marker><pid>-<n>` until it is renamed over `path`.
constexpr std::string_view temp_marker = ".tmp-";

}  // namespace

int remove_abandoned_writes(const std::string& directory) {
  int removed = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto at = name.rfind(temp_marker);
    if (at == std::string::npos) continue;
    long pid = 0;
    unsigned long long n = 0;
    int used = 0;
    const char* rest = name.c_str() + at + temp_marker.size();
    if (std::sscanf(rest, "%ld-%llu%n", &pid, &n, &used) != 2 || rest[used] != '\0' || pid <= 0)
      continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code gone;
    if (std::filesystem::remove(it->path(), gone)) ++removed;
  }
  return removed;
}

Status write_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + std::string(temp_marker) + std::to_string(::getpid()) + "-" +
                          std::to_string(counter++);
  errno = 0;
  File f(std::fopen(tmp.c_str(), "wb"));
  if (!f) return make_error(Errc::io_error, tmp + ": cannot create (" + os_error() + ")");
  Writer w(f.get());
  put_header(w, static_cast<uint32_t>(ckpt.tensors.size() + ckpt.ints.size()));
  for (const auto& [name, t] : ckpt.tensors) {
    TROUPE_ASSERT(t.view().host_float32() || t.data() == nullptr,
                  "a checkpoint holds float32 host tensors: copy device ones with to(cpu)");
    put_record(w, name, kind_float32, t.shape(), t.data(),
               static_cast<uint64_t>(t.size()) * sizeof(float));
  }
  for (const auto& [name, v] : ckpt.ints)
    put_record(w, name, kind_int64, Shape{static_cast<int64_t>(v.size())}, v.data(),
               v.size() * sizeof(int64_t));
  bool ok = w.ok() && std::fflush(f.get()) == 0 && ::fsync(::fileno(f.get())) == 0;
  const std::string why = ok ? "" : os_error();
  ok = (std::fclose(f.release()) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return make_error(Errc::io_error,
                      tmp + ": write failed (" + (why.empty() ? os_error() : why) + ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = os_error();
    std::remove(tmp.c_str());
    return make_error(Errc::io_error, path + ": rename from " + tmp + " failed (" + e + ")");
  }
  return fsync_directory_of(path);
}

Expected<Checkpoint> read_checkpoint(const std::string& path) {
  errno = 0;
  File f(std::fopen(path.c_str(), "rb"));
  if (!f)
    return make_error(errno == ENOENT ? Errc::not_found : Errc::io_error,
                      path + ": cannot open (" + os_error() + ")");
  struct stat sb {};
  if (::fstat(::fileno(f.get()), &sb) != 0)
    return make_error(Errc::io_error, path + ": stat failed (" + os_error() + ")");
  Reader r(f.get(), path, static_cast<int64_t>(sb.st_size));

  char m[sizeof magic];
  uint32_t version = 0, count = 0;
  r.begin_record();
  if (auto st = r.get(m, sizeof m, "the header"); !st) return st.error();
  if (std::memcmp(m, magic, sizeof magic) != 0)
    return make_error(Errc::data_loss, path + ": not a Troupe checkpoint (bad magic at offset 0)");
  if (auto st = r.get_value(version, "the header"); !st) return st.error();
  if (auto st = r.get_value(count, "the header"); !st) return st.error();
  if (auto st = check_crc(r, "the header"); !st) return st.error();
  if (version != checkpoint_format_version)
    return make_error(Errc::data_loss, path + ": checkpoint format version " +
                                           std::to_string(version) + ", this build reads " +
                                           std::to_string(checkpoint_format_version));
  Checkpoint out;
  for (uint32_t i = 0; i < count; ++i)
    if (auto st = read_record(r, i, out); !st) return st.error();
  if (r.remaining() != 0)
    return r.error(std::to_string(r.remaining()) + " trailing bytes after the last record");
  return out;
}

std::vector<int64_t> text_ints(const std::string& text) {
  return std::vector<int64_t>(text.begin(), text.end());
}

std::optional<std::string> ints_text(const std::vector<int64_t>& ints) {
  std::string out;
  for (int64_t c : ints) {
    if (c < 32 || c > 126) return std::nullopt;
    out.push_back(static_cast<char>(c));
  }
  return out;
}

}  // namespace troupe::core
