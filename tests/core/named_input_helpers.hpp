#pragma once

// What the named-input suites share (test_named_input.cpp: TFRecord; test_named_files.cpp:
// Criteo, CSV, IDX): the options of a read, its batches and its error (IDX bytes:
// idx_files.hpp).

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

}  // namespace troupe::test
