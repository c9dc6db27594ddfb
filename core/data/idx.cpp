#include "core/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

namespace troupe::core {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

Error data_loss(const std::string& path, int64_t offset, const std::string& what) {
  return make_error(Errc::data_loss, path + ": " + what + " at offset " + std::to_string(offset));
}

// Reads exactly n bytes at the current position (offset `at`), or says why not.
Status read_exact(gzFile f, const std::string& path, int64_t at, void* dst, size_t n,
                  const char* what) {
  auto* out = static_cast<unsigned char*>(dst);
  size_t got = 0;
  while (got < n) {
    const auto chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    const int r = gzread(f, out + got, chunk);
    if (r < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      return data_loss(path, at + static_cast<int64_t>(got),
                       std::string("corrupt compressed data (") + msg + ") while reading " + what);
    }
    if (r == 0) {
      return data_loss(path, at + static_cast<int64_t>(got),
                       std::string("truncated: ") + what + " needs " + std::to_string(n) +
                           " bytes from offset " + std::to_string(at) + ", the file ends");
    }
    got += static_cast<size_t>(r);
  }
  return {};
}

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Expected<IdxArray> read_idx(const std::string& path) {
  errno = 0;
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) {
    const int e = errno;
    return make_error(e == ENOENT ? Errc::not_found : Errc::io_error,
                      path + ": cannot open (" + std::strerror(e ? e : EIO) + ")");
  }
  gzbuffer(f.get(), 1 << 20);
  unsigned char magic[4];
  if (auto st = read_exact(f.get(), path, 0, magic, 4, "the header"); !st) return st.error();
  if (magic[0] != 0 || magic[1] != 0)
    return data_loss(path, 0, "not an IDX file (magic must start with two zero bytes)");
  if (magic[2] != 0x08)
    return data_loss(path, 2,
                     "unsupported IDX element type 0x" + std::to_string(magic[2]) +
                         " (only unsigned bytes, 0x08)");
  const int ndim = magic[3];
  if (ndim < 1 || ndim > 4) return data_loss(path, 3, "bad IDX rank " + std::to_string(ndim));

  IdxArray a;
  int64_t total = 1;
  for (int i = 0; i < ndim; ++i) {
    unsigned char b[4];
    const int64_t at = 4 + 4 * i;
    if (auto st = read_exact(f.get(), path, at, b, 4, "the dimensions"); !st) return st.error();
    const uint32_t d = big_endian_u32(b);
    // Fashion-MNIST's largest file holds 47 MB; anything near 2^31 elements is corruption.
    if (d == 0 || d > (1u << 28))
      return data_loss(path, at, "implausible dimension " + std::to_string(d));
    a.dims.push_back(d);
    total *= d;
    if (total > (int64_t{1} << 32)) return data_loss(path, at, "implausible total size");
  }
  const int64_t payload_at = 4 + 4 * ndim;
  // Memory follows the bytes that arrive, never the header's word alone: a plain file's
  // size is known up front; a compressed one grows the buffer a chunk at a time.
  if (gzdirect(f.get())) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec && static_cast<int64_t>(size) < payload_at + total)
      return data_loss(path, static_cast<int64_t>(size),
                       "truncated: the header announces " + std::to_string(total) +
                           " payload bytes, the file ends");
  }
  constexpr int64_t chunk = int64_t{16} << 20;
  for (int64_t done = 0; done < total;) {
    const int64_t n = std::min(chunk, total - done);
    a.data.resize(static_cast<size_t>(done + n));
    if (auto st = read_exact(f.get(), path, payload_at + done, a.data.data() + done,
                             static_cast<size_t>(n), "the payload");
        !st)
      return st.error();
    done += n;
  }
  unsigned char extra;
  const int r = gzread(f.get(), &extra, 1);
  if (r != 0)
    return data_loss(path, payload_at + total,
                     r < 0 ? "corrupt compressed data after the payload"
                           : "trailing bytes after the payload the header announced");
  return a;
}

Expected<std::vector<Example>> load_fashion_mnist(const std::string& dir,
                                                  const std::string& split) {
  if (split != "train" && split != "t10k")
    return make_error(Errc::invalid_argument,
                      "unknown Fashion-MNIST split '" + split + "' (known: train, t10k)");
  const std::string images_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  auto images = read_idx(images_path);
  if (!images) return images.error();
  auto labels = read_idx(labels_path);
  if (!labels) return labels.error();
  if (images->dims.size() != 3 || labels->dims.size() != 1)
    return make_error(Errc::data_loss, images_path + " / " + labels_path +
                                           ": expected [n, rows, cols] images and [n] labels");
  if (images->dims[0] != labels->dims[0])
    return make_error(Errc::data_loss, images_path + " holds " + std::to_string(images->dims[0]) +
                                           " images but " + labels_path + " holds " +
                                           std::to_string(labels->dims[0]) + " labels");
  if (images->dims[1] != fashion_mnist_side || images->dims[2] != fashion_mnist_side)
    return make_error(Errc::data_loss,
                      images_path + ": images of " + std::to_string(images->dims[1]) + "x" +
                          std::to_string(images->dims[2]) + " pixels; Fashion-MNIST's are 28x28");
  const int64_t n = images->dims[0];
  const int64_t d = images->dims[1] * images->dims[2];
  std::vector<Example> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Example& e = out[static_cast<size_t>(i)];
    e.features.resize(static_cast<size_t>(d));
    const uint8_t* src = images->data.data() + i * d;
    for (int64_t j = 0; j < d; ++j)
      e.features[static_cast<size_t>(j)] = src[j] * (1.0f / 255.0f);
    const uint8_t label = labels->data[static_cast<size_t>(i)];
    if (label > 9)
      return data_loss(labels_path, 8 + i, "label " + std::to_string(label) + " outside [0, 9]");
    e.label = label;
  }
  return out;
}

}  // namespace troupe::core
