#include "core/keras/zip_archive.hpp"

#include <zip.h>

#include <memory>

namespace troupe::core::keras {

namespace {

struct ArchiveCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct FileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};
struct SourceFreer {
  void operator()(zip_source_t* s) const { zip_source_free(s); }
};
using Archive = std::unique_ptr<zip_t, ArchiveCloser>;
using EntryFile = std::unique_ptr<zip_file_t, FileCloser>;
using Source = std::unique_ptr<zip_source_t, SourceFreer>;

// The end-of-central-directory record: the least any zip archive holds.
constexpr size_t min_archive_bytes = 22;
// 2000-01-01 00:00:00 UTC: late enough that no time zone turns it before 1980, the first
// time a zip's DOS date can hold.
constexpr time_t fixed_mtime = 946684800;

std::string message_of(zip_error_t* e) {
  return zip_error_strerror(e);
}

Error open_error(const std::string& name, zip_error_t* e) {
  if (zip_error_code_zip(e) == ZIP_ER_NOZIP)
    return make_error(Errc::data_loss, name + ": not a zip archive");
  return make_error(Errc::data_loss, name + ": damaged zip archive: " + message_of(e));
}

// Reads the whole of entry `index`, `size` bytes as the central directory says, and then
// its end: libzip checks the CRC there, and an entry that is longer than it said is refused.
Status read_entry(zip_t* za, zip_uint64_t index, uint64_t size, const std::string& where,
                  std::string& out) {
  EntryFile f(zip_fopen_index(za, index, 0));
  if (!f) return make_error(Errc::data_loss, where + ": " + message_of(zip_get_error(za)));
  out.resize(size);
  uint64_t got = 0;
  while (got < size) {
    const zip_int64_t n = zip_fread(f.get(), &out[got], size - got);
    if (n < 0)
      return make_error(Errc::data_loss, where + ": " + message_of(zip_file_get_error(f.get())));
    if (n == 0) break;
    got += static_cast<uint64_t>(n);
  }
  if (got != size)
    return make_error(Errc::data_loss, where + ": truncated (" + std::to_string(got) + " of " +
                                           std::to_string(size) + " bytes)");
  char extra;
  const zip_int64_t n = zip_fread(f.get(), &extra, 1);
  if (n < 0)
    return make_error(Errc::data_loss, where + ": " + message_of(zip_file_get_error(f.get())));
  if (n > 0)
    return make_error(Errc::data_loss,
                      where + ": longer than its stated " + std::to_string(size) + " bytes");
  return {};
}

}  // namespace

Expected<std::vector<ZipEntry>> read_zip(const std::string& bytes, const std::string& name,
                                         const ZipLimits& limits) {
  // libzip opens an empty buffer as a new, empty archive.
  if (bytes.size() < min_archive_bytes)
    return make_error(Errc::data_loss, name + ": not a zip archive");
  zip_error_t err;
  zip_error_init(&err);
  Source src(zip_source_buffer_create(bytes.data(), bytes.size(), 0, &err));
  if (!src) {
    Error e = make_error(Errc::internal, name + ": " + message_of(&err));
    zip_error_fini(&err);
    return e;
  }
  Archive za(zip_open_from_source(src.get(), ZIP_RDONLY | ZIP_CHECKCONS, &err));
  if (!za) {
    Error e = open_error(name, &err);
    zip_error_fini(&err);
    return e;
  }
  src.release();  // the archive owns it now
  zip_error_fini(&err);

  const zip_int64_t count = zip_get_num_entries(za.get(), 0);
  if (count < 0) return make_error(Errc::data_loss, name + ": damaged zip archive");
  if (static_cast<uint64_t>(count) > limits.max_entries)
    return make_error(Errc::out_of_range, name + ": " + std::to_string(count) +
                                              " entries, over the limit of " +
                                              std::to_string(limits.max_entries));
  std::vector<ZipEntry> entries;
  uint64_t total = 0;
  for (zip_uint64_t i = 0; i < static_cast<zip_uint64_t>(count); ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za.get(), i, 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE))
      return make_error(Errc::data_loss, name + ": entry " + std::to_string(i) + ": " +
                                             message_of(zip_get_error(za.get())));
    std::string entry_name = st.name;
    const std::string where = name + ": " + entry_name;
    if (!entry_name.empty() && entry_name.back() == '/') continue;  // a directory
    if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)
      return make_error(Errc::invalid_argument, where + ": encrypted");
    if (st.size > limits.max_entry_bytes)
      return make_error(Errc::out_of_range, where + ": " + std::to_string(st.size) +
                                                " bytes, over the limit of " +
                                                std::to_string(limits.max_entry_bytes));
    total += st.size;
    if (total > limits.max_total_bytes)
      return make_error(Errc::out_of_range,
                        where + ": the entries so far hold " + std::to_string(total) +
                            " bytes, over the limit of " + std::to_string(limits.max_total_bytes));
    ZipEntry e;
    e.name = std::move(entry_name);
    if (auto s = read_entry(za.get(), i, st.size, where, e.bytes); !s) return s.error();
    entries.push_back(std::move(e));
  }
  return entries;
}

Status write_zip(const std::vector<ZipEntry>& entries, const std::string& name,
                 const std::function<Status(const char* data, size_t n)>& sink) {
  // libzip writes nothing at all for an archive without entries.
  if (entries.empty()) {
    static const std::string empty = std::string("PK\x05\x06", 4) + std::string(18, '\0');
    return sink(empty.data(), empty.size());
  }
  zip_error_t err;
  zip_error_init(&err);
  Source out(zip_source_buffer_create(nullptr, 0, 0, &err));
  if (!out) {
    Error e = make_error(Errc::internal, name + ": " + message_of(&err));
    zip_error_fini(&err);
    return e;
  }
  zip_source_keep(out.get());  // the bytes are read from it after the archive is closed
  Archive za(zip_open_from_source(out.get(), ZIP_TRUNCATE, &err));
  if (!za) {
    Error e = make_error(Errc::internal, name + ": " + message_of(&err));
    zip_error_fini(&err);
    return e;
  }
  zip_error_fini(&err);
  auto fail = [&](const std::string& what) {
    return make_error(Errc::internal,
                      name + ": " + what + ": " + message_of(zip_get_error(za.get())));
  };
  for (const ZipEntry& e : entries) {
    zip_source_t* s = zip_source_buffer(za.get(), e.bytes.data(), e.bytes.size(), 0);
    if (s == nullptr) return fail(e.name);
    const zip_int64_t idx = zip_file_add(za.get(), e.name.c_str(), s, ZIP_FL_ENC_UTF_8);
    if (idx < 0) {
      zip_source_free(s);
      return zip_error_code_zip(zip_get_error(za.get())) == ZIP_ER_EXISTS
                 ? make_error(Errc::invalid_argument,
                              name + ": " + e.name + ": a second entry of that name")
                 : fail(e.name);
    }
    const auto i = static_cast<zip_uint64_t>(idx);
    if (zip_set_file_compression(za.get(), i, ZIP_CM_STORE, 0) != 0 ||
        zip_file_set_mtime(za.get(), i, fixed_mtime, 0) != 0 ||
        zip_file_set_external_attributes(za.get(), i, 0, ZIP_OPSYS_UNIX, 0100644u << 16) != 0)
      return fail(e.name);
  }
  if (zip_close(za.get()) != 0) return fail("writing the archive");
  za.release();  // zip_close freed it

  if (zip_source_open(out.get()) != 0)
    return make_error(Errc::internal, name + ": reading the archive back");
  char buf[1 << 16];
  for (;;) {
    const zip_int64_t n = zip_source_read(out.get(), buf, sizeof buf);
    if (n < 0) {
      zip_source_close(out.get());
      return make_error(Errc::internal, name + ": reading the archive back");
    }
    if (n == 0) break;
    if (auto st = sink(buf, static_cast<size_t>(n)); !st) {
      zip_source_close(out.get());
      return st;
    }
  }
  zip_source_close(out.get());
  return {};
}

Expected<std::string> write_zip(const std::vector<ZipEntry>& entries, const std::string& name) {
  std::string bytes;
  auto st = write_zip(entries, name, [&](const char* data, size_t n) {
    bytes.append(data, n);
    return Status{};
  });
  if (!st) return st.error();
  return bytes;
}

}  // namespace troupe::core::keras
