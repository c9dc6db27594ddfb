#include "core/keras/h5_weights.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/half.hpp"

namespace troupe::core::keras {

namespace {

// HDF5's error printing is set per thread, and its library state is process-wide: every
// entry point takes this lock and silences the printing before its first call.
std::mutex h5_mutex;

// An HDF5 id closed by its own close function.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Hid& operator=(Hid&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

herr_t keep_deepest(unsigned, const H5E_error2_t* e, void* out) {
  if (e->desc != nullptr && e->desc[0] != '\0') *static_cast<std::string*>(out) = e->desc;
  return 0;
}

// The most specific message on this thread's HDF5 error stack, which is then cleared.
std::string h5_message() {
  std::string m;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_deepest, &m);
  H5Eclear2(H5E_DEFAULT);
  return m.empty() ? "HDF5 error" : m;
}

// A name for an in-memory file that no other open file of this process has: HDF5 keeps
// one record per open file name.
std::string unique_name() {
  static std::atomic<uint64_t> next{0};
  return "troupe-keras-" + std::to_string(::getpid()) + "-" + std::to_string(next++) + ".h5";
}

// A file access list for the core driver that never writes a backing file.
Hid memory_fapl() {
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (fapl.ok() && H5Pset_fapl_core(fapl.get(), 1 << 20, 0) < 0) return {};
  return fapl;
}

// A creation list for objects that record no times (as h5py makes them): equal contents
// give equal bytes.
Hid untimed(hid_t list_class) {
  Hid p(H5Pcreate(list_class), H5Pclose);
  if (p.ok()) H5Pset_obj_track_times(p.get(), 0);
  return p;
}

// A string attribute's value, "" where it is not a string of one element.
std::string string_attribute(hid_t obj, const char* attr) {
  if (H5Aexists(obj, attr) <= 0) return {};
  Hid a(H5Aopen(obj, attr, H5P_DEFAULT), H5Aclose);
  if (!a.ok()) return {};
  Hid type(H5Aget_type(a.get()), H5Tclose);
  Hid space(H5Aget_space(a.get()), H5Sclose);
  if (!type.ok() || !space.ok() || H5Tget_class(type.get()) != H5T_STRING ||
      H5Sget_simple_extent_npoints(space.get()) != 1)
    return {};
  if (H5Tis_variable_str(type.get()) > 0) {
    Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    char* s = nullptr;
    if (H5Aread(a.get(), mem.get(), &s) < 0 || s == nullptr) return {};
    std::string out = s;
    H5free_memory(s);
    return out;
  }
  const size_t size = H5Tget_size(type.get());
  if (size == 0 || size > (1 << 20)) return {};
  std::string out(size, '\0');
  if (H5Aread(a.get(), type.get(), &out[0]) < 0) return {};
  out.resize(out.find('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

struct Walk {
  hid_t file;
  const std::string& name;
  const H5Limits& limits;
  H5Weights out;
  uint64_t objects = 0;
  uint64_t total_bytes = 0;
  std::optional<Error> error;
};

Status read_dataset(Walk& w, const std::string& path) {
  const std::string where = w.name + ": dataset " + path;
  Hid d(H5Dopen2(w.file, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.ok()) return make_error(Errc::data_loss, where + ": " + h5_message());
  Hid dcpl(H5Dget_create_plist(d.get()), H5Pclose);
  if (!dcpl.ok()) return make_error(Errc::data_loss, where + ": " + h5_message());
  // Either would read another file than the one given.
  if (H5Pget_layout(dcpl.get()) == H5D_VIRTUAL)
    return make_error(Errc::invalid_argument, where + ": a virtual dataset");
  if (H5Pget_external_count(dcpl.get()) != 0)
    return make_error(Errc::invalid_argument, where + ": stored in an external file");

  Hid type(H5Dget_type(d.get()), H5Tclose);
  Hid space(H5Dget_space(d.get()), H5Sclose);
  if (!type.ok() || !space.ok()) return make_error(Errc::data_loss, where + ": " + h5_message());
  const H5T_class_t cls = H5Tget_class(type.get());
  // Keras writes bfloat16 variables as 2-byte opaque data marked by a "dtype" attribute.
  const bool bf16 = cls == H5T_OPAQUE && H5Tget_size(type.get()) == 2 &&
                    string_attribute(d.get(), "dtype") == "bfloat16";
  if (cls != H5T_FLOAT && cls != H5T_INTEGER && !bf16)
    return make_error(Errc::invalid_argument, where + ": not a number (HDF5 type class " +
                                                  std::to_string(static_cast<int>(cls)) + ")");
  const H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
  if (space_class != H5S_SCALAR && space_class != H5S_SIMPLE)
    return make_error(Errc::invalid_argument, where + ": no dataspace (a null dataset)");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) return make_error(Errc::data_loss, where + ": " + h5_message());
  if (rank > Shape::max_rank)
    return make_error(Errc::invalid_argument, where + ": rank " + std::to_string(rank) +
                                                  ", over the " + std::to_string(Shape::max_rank) +
                                                  " a tensor holds");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
    return make_error(Errc::data_loss, where + ": " + h5_message());

  const DType dtype = cls == H5T_INTEGER ? DType::int64 : DType::float32;
  const uint64_t element = dtype_size(dtype);
  uint64_t bytes = element;
  std::vector<int64_t> shape;
  for (hsize_t n : dims) {
    if (n != 0 && bytes > w.limits.max_dataset_bytes / n)
      return make_error(
          Errc::out_of_range,
          where + ": over the limit of " + std::to_string(w.limits.max_dataset_bytes) + " bytes");
    bytes *= n;
    shape.push_back(static_cast<int64_t>(n));
  }
  w.total_bytes += bytes;
  if (w.total_bytes > w.limits.max_total_bytes)
    return make_error(Errc::out_of_range,
                      where + ": the datasets so far hold " + std::to_string(w.total_bytes) +
                          " bytes, over the limit of " + std::to_string(w.limits.max_total_bytes));

  Tensor t(Shape(shape), dtype, Device::cpu());
  if (t.size() > 0) {
    herr_t rc;
    if (bf16) {
      std::vector<uint16_t> raw(static_cast<size_t>(t.size()));
      rc = H5Dread(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data());
      if (rc >= 0) from_half(raw.data(), t.data(), raw.size(), DType::bfloat16);
    } else {
      const hid_t mem = dtype == DType::int64 ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT;
      rc = H5Dread(d.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_as<void>());
    }
    if (rc < 0) return make_error(Errc::data_loss, where + ": " + h5_message());
  }
  w.out.datasets.emplace(path, std::move(t));
  return {};
}

herr_t visit(hid_t, const char* name, const H5O_info_t* info, void* data) {
  auto& w = *static_cast<Walk*>(data);
  const std::string path = name;
  if (path == ".") return 0;  // the root
  if (++w.objects > w.limits.max_objects) {
    w.error = make_error(Errc::out_of_range,
                         w.name + ": over " + std::to_string(w.limits.max_objects) + " objects");
    return -1;
  }
  if (info->type == H5O_TYPE_GROUP) {
    Hid g(H5Gopen2(w.file, name, H5P_DEFAULT), H5Gclose);
    if (!g.ok()) {
      w.error = make_error(Errc::data_loss, w.name + ": group " + path + ": " + h5_message());
      return -1;
    }
    w.out.groups[path] = string_attribute(g.get(), "name");
  } else if (info->type == H5O_TYPE_DATASET) {
    if (auto s = read_dataset(w, path); !s) {
      w.error = s.error();
      return -1;
    }
  }
  return 0;
}

// Whether `path` names an object, every link on the way to it included.
bool exists(hid_t loc, const std::string& path) {
  for (size_t pos = path.find('/');; pos = path.find('/', pos + 1)) {
    const std::string prefix = path.substr(0, pos);
    if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

bool valid_path(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') return false;
  return path.find("//") == std::string::npos && path != "." &&
         path.find("/./") == std::string::npos;
}

Status make_group(hid_t file, const std::string& path, const std::string& object_name,
                  const std::string& where) {
  for (size_t pos = path.find('/');; pos = path.find('/', pos + 1)) {
    const std::string prefix = path.substr(0, pos);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) {
      Hid gcpl = untimed(H5P_GROUP_CREATE);
      Hid g(H5Gcreate2(file, prefix.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
      if (!g.ok())
        return make_error(Errc::invalid_argument,
                          where + ": group " + prefix + ": " + h5_message());
    }
    if (pos == std::string::npos) break;
  }
  if (object_name.empty()) return {};
  Hid g(H5Gopen2(file, path.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.ok())
    return make_error(Errc::invalid_argument, where + ": group " + path + ": " + h5_message());
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(g.get(), "name", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const char* value = object_name.c_str();
  if (!a.ok() || H5Awrite(a.get(), type.get(), &value) < 0)
    return make_error(Errc::internal, where + ": group " + path + ": name: " + h5_message());
  return {};
}

// The stored type of `path` in `original` when it is a dataset of the same kind as `t`.
Hid original_type(hid_t original, const std::string& path, const Tensor& t) {
  if (original < 0 || !exists(original, path)) return {};
  H5O_info_t info;
#if H5_VERSION_GE(1, 12, 0)
  if (H5Oget_info_by_name3(original, path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    return {};
#else
  if (H5Oget_info_by_name2(original, path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    return {};
#endif
  if (info.type != H5O_TYPE_DATASET) return {};
  Hid d(H5Dopen2(original, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.ok()) return {};
  Hid type(H5Dget_type(d.get()), H5Tclose);
  const H5T_class_t want = t.dtype() == DType::float32 ? H5T_FLOAT : H5T_INTEGER;
  if (!type.ok() || H5Tget_class(type.get()) != want) return {};
  return type;
}

Status write_dataset(hid_t file, hid_t original, const std::string& path, const Tensor& t,
                     const std::string& where_file) {
  const std::string where = where_file + ": dataset " + path;
  if (!valid_path(path)) return make_error(Errc::invalid_argument, where + ": not a valid path");
  if (!t.device().is_cpu() ||
      (t.dtype() != DType::float32 && t.dtype() != DType::int32 && t.dtype() != DType::int64))
    return make_error(Errc::invalid_argument,
                      where + ": a " + dtype_name(t.dtype()) + " tensor on " +
                          t.device().to_string() +
                          " (float32, int32 or int64 on the CPU are written)");
  const hid_t mem = t.dtype() == DType::float32 ? H5T_NATIVE_FLOAT
                    : t.dtype() == DType::int32 ? H5T_NATIVE_INT32
                                                : H5T_NATIVE_INT64;
  const hid_t file_default = t.dtype() == DType::float32 ? H5T_IEEE_F32LE
                             : t.dtype() == DType::int32 ? H5T_STD_I32LE
                                                         : H5T_STD_I64LE;
  Hid kept = original_type(original, path, t);
  const hid_t ftype = kept.ok() ? kept.get() : file_default;
  std::vector<hsize_t> dims;
  for (int i = 0; i < t.shape().rank(); ++i)
    dims.push_back(static_cast<hsize_t>(t.shape()[i]));
  Hid space(dims.empty() ? H5Screate(H5S_SCALAR)
                         : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
            H5Sclose);
  Hid dcpl = untimed(H5P_DATASET_CREATE);
  Hid d(H5Dcreate2(file, path.c_str(), ftype, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
        H5Dclose);
  if (!space.ok() || !d.ok())
    return make_error(Errc::invalid_argument, where + ": " + h5_message());
  if (t.size() > 0 && H5Dwrite(d.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_as<void>()) < 0)
    return make_error(Errc::internal, where + ": " + h5_message());
  return {};
}

// Opens an image read-only in memory.
Expected<Hid> open_image(const std::string& image, const std::string& name) {
  // An HDF5 file's superblock alone is larger; HDF5 refuses an empty image less clearly.
  if (image.size() < 8) return make_error(Errc::data_loss, name + ": not an HDF5 file");
  Hid fapl = memory_fapl();
  if (!fapl.ok() ||
      H5Pset_file_image(fapl.get(), const_cast<char*>(image.data()), image.size()) < 0)
    return make_error(Errc::internal, name + ": " + h5_message());
  Hid file(H5Fopen(unique_name().c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.ok())
    return make_error(Errc::data_loss, name + ": not a readable HDF5 file: " + h5_message());
  return file;
}

}  // namespace

Expected<H5Weights> read_h5_weights(const std::string& image, const std::string& name,
                                    const H5Limits& limits) {
  std::lock_guard<std::mutex> lock(h5_mutex);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  auto file = open_image(image, name);
  if (!file) return file.error();
  Walk w{file->get(), name, limits, {}, 0, 0, {}};
  // H5Ovisit follows hard links only, and each object once: a link cycle ends there.
#if H5_VERSION_GE(1, 12, 0)
  const herr_t rc = H5Ovisit3(file->get(), H5_INDEX_NAME, H5_ITER_INC, visit, &w, H5O_INFO_BASIC);
#else
  const herr_t rc = H5Ovisit2(file->get(), H5_INDEX_NAME, H5_ITER_INC, visit, &w, H5O_INFO_BASIC);
#endif
  if (w.error) {
    H5Eclear2(H5E_DEFAULT);
    return *w.error;
  }
  if (rc < 0) return make_error(Errc::data_loss, name + ": " + h5_message());
  return std::move(w.out);
}

Expected<std::string> write_h5_weights(const std::map<std::string, Tensor>& datasets,
                                       const std::map<std::string, std::string>& groups,
                                       const std::string& original, const std::string& name) {
  std::lock_guard<std::mutex> lock(h5_mutex);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Hid source;
  if (!original.empty()) {
    auto o = open_image(original, name + " (the original)");
    if (!o) return o.error();
    source = std::move(*o);
  }
  Hid fapl = memory_fapl();
  if (!fapl.ok()) return make_error(Errc::internal, name + ": " + h5_message());
  Hid file(H5Fcreate(unique_name().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  if (!file.ok()) return make_error(Errc::internal, name + ": " + h5_message());

  // Every group asked for, and the parents of every dataset, each once.
  std::map<std::string, std::string> all_groups = groups;
  for (const auto& entry : datasets) {
    const size_t slash = entry.first.rfind('/');
    if (slash != std::string::npos && slash > 0)
      all_groups.emplace(entry.first.substr(0, slash), "");
  }
  for (const auto& [path, object_name] : all_groups) {
    if (!valid_path(path))
      return make_error(Errc::invalid_argument, name + ": group " + path + ": not a valid path");
    if (auto s = make_group(file.get(), path, object_name, name); !s) return s.error();
  }
  for (const auto& [path, tensor] : datasets)
    if (auto s = write_dataset(file.get(), source.get(), path, tensor, name); !s) return s.error();

  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0)
    return make_error(Errc::internal, name + ": " + h5_message());
  const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
  if (size < 0) return make_error(Errc::internal, name + ": " + h5_message());
  std::string image(static_cast<size_t>(size), '\0');
  if (H5Fget_file_image(file.get(), &image[0], image.size()) < 0)
    return make_error(Errc::internal, name + ": " + h5_message());
  return image;
}

}  // namespace troupe::core::keras
