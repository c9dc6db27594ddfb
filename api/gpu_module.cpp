// Loads libtroupe_gpu.so (gpu/module.hpp) on first need. Compiled where TROUPE_WITH_CUDA
// builds the module; this file itself includes no CUDA header and links no CUDA library.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/module.hpp"

namespace troupe::gpu {

namespace {

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// The folders to look in: that of the shared library holding this code (a Python
// extension), then the program's.
std::vector<std::string> home_directories() {
  std::vector<std::string> dirs;
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&directory_of), &info) != 0 &&
      info.dli_fname != nullptr && info.dli_fname[0] == '/')
    dirs.push_back(directory_of(info.dli_fname));
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    const std::string dir = directory_of(std::string(self, static_cast<size_t>(n)));
    if (dirs.empty() || dirs.front() != dir) dirs.push_back(dir);
  }
  return dirs;
}

core::Expected<const ModuleApi*> load_once() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TROUPE_GPU_MODULE"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);  // the user's choice, and only it
  } else {
    for (const auto& dir : home_directories()) {
      candidates.push_back(dir + "/../lib/" + module_file_name);
      candidates.push_back(dir + "/" + module_file_name);
    }
#ifdef TROUPE_GPU_MODULE_INSTALLED
    candidates.emplace_back(TROUPE_GPU_MODULE_INSTALLED);  // cmake --install's
#endif
  }
  std::string tried;
  for (const auto& path : candidates) {
    if (access(path.c_str(), F_OK) != 0) {
      tried += (tried.empty() ? "" : "; ") + path + ": no such file";
      continue;
    }
    // RTLD_LOCAL: the module's copies of core's code stay its own; only the entry is used.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += (tried.empty() ? "" : "; ") + path + ": " + (why ? why : "dlopen failed");
      continue;
    }
    auto entry = reinterpret_cast<ModuleEntry>(dlsym(handle, module_entry_name));
    const ModuleApi* api = entry != nullptr ? entry(module_abi()) : nullptr;
    if (api == nullptr) {
      tried += (tried.empty() ? "" : "; ") + path +
               (entry == nullptr ? ": no entry point (not Troupe's GPU module)"
                                 : ": a module of another Troupe build");
      dlclose(handle);
      continue;
    }
    return api;  // never unloaded: its code backs tensors and devices until exit
  }
  return core::make_error(
      core::Errc::unavailable,
      std::string("the CUDA backend (") + module_file_name + ") could not be loaded: " + tried);
}

}  // namespace

core::Expected<const ModuleApi*> load_module() {
  static std::once_flag once;
  static core::Expected<const ModuleApi*>* loaded = nullptr;
  std::call_once(once, [] { loaded = new core::Expected<const ModuleApi*>(load_once()); });
  return *loaded;
}

}  // namespace troupe::gpu
