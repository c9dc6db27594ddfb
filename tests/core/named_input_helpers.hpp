#pragma once

// What the named-input suites share (test_named_input.cpp: TFRecord; test_named_files.cpp:
// Criteo, CSV, IDX): the options of a read, its batches, its error, and IDX bytes.

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/named_input.hpp"

namespace troupe::test {

inline core::NamedInputOptions options(core::DataFormat format,
                                       std::vector<core::FeatureSpec> specs, size_t batch) {
  core::NamedInputOptions o;
  o.format = format;
  o.features = std::move(specs);
  o.batch = batch;
  o.drop_remainder = false;
  o.epochs = 1;
  o.prefetch = 0;
  return o;
}

// Every batch of one pass, in order.
inline std::vector<core::Batch> all(const core::Dataset<core::Batch>& ds) {
  std::vector<core::Batch> out;
  auto it = ds.make_iterator();
  while (auto b = it->next())
    out.push_back(std::move(*b));
  return out;
}

// The error of reading the whole input: what next() throws.
inline core::Error read_error(const std::vector<std::string>& files,
                              const core::NamedInputOptions& o) {
  auto got = core::read_named_batches(files, o);
  REQUIRE_FALSE(got.ok());
  return got.error();
}

inline std::vector<char> idx_bytes(std::vector<uint32_t> dims, const std::vector<uint8_t>& data) {
  std::vector<char> b{0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8)
      b.push_back(static_cast<char>((d >> s) & 0xff));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

}  // namespace troupe::test
