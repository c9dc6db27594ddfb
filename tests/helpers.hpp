#pragma once

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace troupe::test {

/// Sets (or, with null, unsets) an environment variable for one scope, then puts back
/// what was there.
class Env {
 public:
  Env(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = std::string(old);
    if (value != nullptr)
      ::setenv(name_.c_str(), value, 1);
    else
      ::unsetenv(name_.c_str());
  }
  Env(std::string name, const std::string& value) : Env(std::move(name), value.c_str()) {}
  ~Env() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

/// A fresh directory under the system temp dir, removed with everything in it at scope end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "troupe-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline core::Tensor random_tensor(core::Shape shape, uint64_t seed, float lo = -1.0f,
                                  float hi = 1.0f) {
  core::Tensor t(shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i)
    t[i] = d(rng);
  return t;
}

// The files process `pid` has mapped whose paths contain one of `parts` (each named once):
// which shared libraries it loaded, from /proc/PID/maps.
inline std::vector<std::string> mapped_files_with(long pid, const std::vector<std::string>& parts) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::vector<std::string> found;
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    for (const auto& part : parts)
      if (path.find(part) != std::string::npos &&
          std::find(found.begin(), found.end(), path) == found.end())
        found.push_back(path);
  }
  return found;
}

// The CUDA libraries a process that computes on the CPU must not map (gpu/module.hpp).
inline const std::vector<std::string> cuda_library_names{"libcudart", "libcublas", "libcudnn",
                                                         "libnccl", "libtroupe_gpu"};

inline std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

inline void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Waits (at most `timeout`) until `ready()` holds, checking it again each time a file is
/// created in or renamed into `dir` (checkpoint writers rename their files into place).
inline bool wait_for_file_in(const std::string& dir, const std::function<bool()>& ready,
                             std::chrono::milliseconds timeout) {
  const int watch = ::inotify_init1(IN_CLOEXEC);
  if (watch < 0) return false;
  if (::inotify_add_watch(watch, dir.c_str(), IN_MOVED_TO | IN_CREATE) < 0) {
    ::close(watch);
    return false;
  }
  bool ok = ready();
  for (auto deadline = std::chrono::steady_clock::now() + timeout; !ok;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{watch, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char events[4096];
    (void)::read(watch, events, sizeof events);
    ok = ready();
  }
  ::close(watch);
  return ok;
}

/// The test accuracy every Fashion-MNIST run trained asynchronously (fmnist_ps, fmnist_fit
/// on a PS cluster) clears. With SGD at lr 0.1 on batches of 64 the final iterate scatters
/// run to run: one process, same settings, 14 seeds gave 0.79 to 0.85 (median 0.843);
/// fmnist_ps under launch 0.830 to 0.851; a loaded clean-clone run 0.78 and another
/// 0.8247. A floor inside that scatter is a coin toss; this one is below it and far above
/// what broken training reaches (chance is 0.10). docs/benchmarks.md keeps the medians.
inline constexpr double async_accuracy_floor = 0.75;

}  // namespace troupe::test
