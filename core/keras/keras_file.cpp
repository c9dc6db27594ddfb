#include "core/keras/keras_file.hpp"
#include "core/json_limits.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace troupe::core::keras {

namespace {

const char* const config_name = "config.json";
const char* const metadata_name = "metadata.json";
const char* const weights_name = "model.weights.h5";

std::string os_error() {
  return std::strerror(errno);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

Expected<std::string> read_file(const std::string& path, uint64_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    return make_error(errno == ENOENT ? Errc::not_found : Errc::io_error,
                      path + ": cannot open (" + os_error() + ")");
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return make_error(Errc::io_error, path + ": " + os_error());
  if (!S_ISREG(st.st_mode))
    return make_error(Errc::invalid_argument, path + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return make_error(Errc::out_of_range, path + ": " + std::to_string(st.st_size) +
                                              " bytes, over the limit of " +
                                              std::to_string(max_bytes));
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd.get(), &bytes[got], bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(Errc::io_error, path + ": read failed (" + os_error() + ")");
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);  // a file that shrank while read
  return bytes;
}

// With a bounded stack (core/json_limits.hpp): a config nested too deeply is refused here.
Expected<nlohmann::json> parse_json(const std::string& text, const std::string& where) {
  if (const int d = json_depth(text); d > kMaxJsonDepth)
    return make_error(Errc::invalid_argument, where + ": JSON nested " + std::to_string(d) +
                                                  " levels deep, over Troupe's limit of " +
                                                  std::to_string(kMaxJsonDepth));
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::data_loss, where + ": not JSON: " + e.what());
  }
}

// What both config.json and model.to_json() hold: {"class_name": ..., "config": {...}}.
Status check_model(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return make_error(Errc::invalid_argument, where + ": not a JSON object");
  auto cls = j.find("class_name");
  if (cls == j.end() || !cls->is_string())
    return make_error(Errc::invalid_argument,
                      where + ": no class_name: not a Keras model description");
  auto config = j.find("config");
  if (config == j.end() || !config->is_object())
    return make_error(Errc::invalid_argument,
                      where + ": no config object: not a Keras model description");
  return {};
}

// An asset's path inside the archive: relative, and nothing that leaves it when extracted.
bool safe_entry_name(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.back() == '/' ||
      name.find('\\') != std::string::npos)
    return false;
  size_t start = 0;
  for (;;) {
    const size_t end = name.find('/', start);
    const std::string part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (end == std::string::npos) return true;
    start = end + 1;
  }
}

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status fsync_directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0)
    return make_error(Errc::io_error, dir + ": cannot open directory (" + os_error() + ")");
  if (::fsync(fd.get()) != 0)
    return make_error(Errc::io_error, dir + ": fsync failed (" + os_error() + ")");
  return {};
}

}  // namespace

Expected<KerasFile> read_keras(const std::string& path, const KerasLimits& limits) {
  auto bytes = read_file(path, limits.max_file_bytes);
  if (!bytes) return bytes.error();
  return read_keras_bytes(*bytes, path, limits);
}

Expected<KerasFile> read_keras_bytes(const std::string& bytes, const std::string& name,
                                     const KerasLimits& limits) {
  auto entries = read_zip(bytes, name, limits.zip);
  if (!entries) return entries.error();
  KerasFile f;
  std::string *config = nullptr, *metadata = nullptr, *weights = nullptr;
  bool npz = false;
  for (ZipEntry& e : *entries) {
    std::string** slot = e.name == config_name     ? &config
                         : e.name == metadata_name ? &metadata
                         : e.name == weights_name  ? &weights
                                                   : nullptr;
    if (slot != nullptr) {
      if (*slot != nullptr) return make_error(Errc::data_loss, name + ": " + e.name + " twice");
      *slot = &e.bytes;
      continue;
    }
    if (e.name == "model.weights.npz") npz = true;
    if (!f.assets.emplace(e.name, std::move(e.bytes)).second)
      return make_error(Errc::data_loss, name + ": " + e.name + " twice");
  }
  if (config == nullptr)
    return make_error(Errc::invalid_argument, name + ": no config.json: not a Keras 3 .keras file");
  auto cfg = parse_json(*config, name + ": config.json");
  if (!cfg) return cfg.error();
  if (auto s = check_model(*cfg, name + ": config.json"); !s) return s.error();
  f.config = std::move(*cfg);
  if (metadata != nullptr) {
    auto m = parse_json(*metadata, name + ": metadata.json");
    if (!m) return m.error();
    f.metadata = std::move(*m);
  }
  if (weights == nullptr)
    return make_error(
        Errc::invalid_argument,
        name + (npz ? ": weights in model.weights.npz, which is not read (save with the h5 format)"
                    : ": no model.weights.h5"));
  auto w = read_h5_weights(*weights, name + ": model.weights.h5", limits.h5);
  if (!w) return w.error();
  f.weights = std::move(w->datasets);
  f.weight_groups = std::move(w->groups);
  f.weights_h5 = std::make_shared<const std::string>(std::move(*weights));
  return f;
}

Expected<nlohmann::json> read_model_json(const std::string& path) {
  auto text = read_file(path, uint64_t{1} << 30);
  if (!text) return text.error();
  auto j = parse_json(*text, path);
  if (!j) return j.error();
  if (auto s = check_model(*j, path); !s) return s.error();
  return j;
}

namespace {

// The entries of a .keras file holding `file`, in Keras's order.
Expected<std::vector<ZipEntry>> keras_entries(const KerasFile& file, const std::string& name) {
  if (auto s = check_model(file.config, name + ": config.json"); !s) return s.error();
  if (!file.metadata.is_object())
    return make_error(Errc::invalid_argument, name + ": metadata.json: not a JSON object");
  static const std::string none;
  auto h5 =
      write_h5_weights(file.weights, file.weight_groups, file.weights_h5 ? *file.weights_h5 : none,
                       name + ": model.weights.h5");
  if (!h5) return h5.error();
  std::vector<ZipEntry> entries;
  entries.push_back({metadata_name, dump(file.metadata)});
  entries.push_back({config_name, dump(file.config)});
  entries.push_back({weights_name, std::move(*h5)});
  for (const auto& [path, bytes] : file.assets) {
    if (path == config_name || path == metadata_name || path == weights_name ||
        !safe_entry_name(path))
      return make_error(Errc::invalid_argument,
                        name + ": asset " + path + ": not a name an asset can have");
    entries.push_back({path, bytes});
  }
  return entries;
}

}  // namespace

Expected<std::string> write_keras_bytes(const KerasFile& file, const std::string& name) {
  auto entries = keras_entries(file, name);
  if (!entries) return entries.error();
  return write_zip(*entries, name);
}

Status write_keras(const std::string& path, const KerasFile& file) {
  auto entries = keras_entries(file, path);
  if (!entries) return entries.error();
  std::string tmp = path + ".tmp-XXXXXX";
  Fd fd(::mkstemp(&tmp[0]));
  if (fd.get() < 0)
    return make_error(Errc::io_error,
                      path + ": cannot create a temporary file (" + os_error() + ")");
  auto fail = [&](const std::string& what) {
    const std::string why = os_error();
    ::unlink(tmp.c_str());
    return make_error(Errc::io_error, path + ": " + what + " " + tmp + " failed (" + why + ")");
  };
  // Written as the archive is read out of libzip: no second copy of a big model's bytes.
  auto written = write_zip(*entries, path, [&](const char* data, size_t size) -> Status {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd.get(), data + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return fail("writing");
      done += static_cast<size_t>(n);
    }
    return {};
  });
  if (!written) {
    ::unlink(tmp.c_str());  // the archive failed: no partial file left behind
    return written;
  }
  // mkstemp makes the file for its owner only; a saved model is as readable as others.
  if (::fchmod(fd.get(), 0644) != 0 || ::fsync(fd.get()) != 0) return fail("syncing");
  if (::close(fd.release()) != 0) return fail("closing");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("renaming");
  return fsync_directory_of(path);
}

}  // namespace troupe::core::keras
