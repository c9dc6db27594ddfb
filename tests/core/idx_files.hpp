#pragma once

// IDX files for the reader suites (test_readers.cpp, test_named_input.cpp,
// test_named_files.cpp): their bytes, and a gzip'ed copy on disk as Fashion-MNIST ships them.

#include <catch2/catch.hpp>

#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::test {

// An IDX file of unsigned bytes: its header (magic, the dims big-endian), then `data`.
inline std::vector<char> idx_bytes(std::vector<uint32_t> dims, const std::vector<uint8_t>& data) {
  std::vector<char> b{0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8)
      b.push_back(static_cast<char>((d >> s) & 0xff));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// The same with every value given: fill_base + i % 10 for the i-th.
inline std::vector<char> idx_filled(const std::vector<uint32_t>& dims, uint8_t fill_base) {
  size_t n = 1;
  for (uint32_t d : dims)
    n *= d;
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < n; ++i)
    data[i] = static_cast<uint8_t>(fill_base + i % 10);
  return idx_bytes(dims, data);
}

inline void write_gz(const std::string& path, const std::vector<char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  gzclose(f);
}

}  // namespace troupe::test
