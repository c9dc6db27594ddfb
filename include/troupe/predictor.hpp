#pragma once

// Scoring with an exported click-through-rate model (`troupe export`, core/nn/ctr_export.hpp),
// with no cluster: the dense parameters and the table's rows in this process.
//
//   auto p = troupe::Predictor::load("/models/ctr.tmodel").value();
//   auto probabilities = p.predict(batch).value();  // a click probability an example
//
// A key (dynamic table) the export does not hold reads as zeros, as a training step reads a
// key without a row. One Predictor serves one thread at a time (it keeps its buffers); load
// one per serving thread, or guard it.

#include <memory>
#include <vector>

#include "core/data/example.hpp"
#include "core/data/text_formats.hpp"
#include "core/expected.hpp"
#include "core/nn/ctr_export.hpp"

namespace troupe {

class Predictor {
 public:
  /// Reads and checks an export; errors name the file (and the offset of damage).
  static core::Expected<Predictor> load(const std::string& path);
  /// Builds one from an export in memory (tests, tools).
  static core::Expected<Predictor> from(core::CtrExport model);
  Predictor(Predictor&&) noexcept;
  Predictor& operator=(Predictor&&) noexcept;
  ~Predictor();

  /// The click probability of each example of `batch`. A batch of another shape, or (a
  /// fixed table) an id outside the table, is an invalid_argument error.
  core::Expected<std::vector<float>> predict(const core::Batch& batch);

  const core::CtrExportConfig& config() const;
  /// How Criteo text is read for this model (raw 64-bit keys, or buckets per field).
  core::CriteoOptions criteo_options() const;
  /// The rows the table holds, and their bytes in memory (bf16 exports hold 2 a value).
  int64_t rows() const;
  int64_t table_bytes() const;

 private:
  struct Impl;
  explicit Predictor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
