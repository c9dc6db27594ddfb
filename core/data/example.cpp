#include "core/data/example.hpp"

#include <algorithm>

namespace troupe::core {

const Column* Batch::column(const std::string& name) const {
  for (const Column& c : columns)
    if (c.name == name) return &c;
  return nullptr;
}

Batch collate(const std::vector<Example>& examples) {
  Batch b;
  const auto n = static_cast<int64_t>(examples.size());
  const auto d = n == 0 ? 0 : static_cast<int64_t>(examples.front().features.size());
  b.features.resize(Shape{n, d});
  b.labels.reserve(examples.size());
  b.classes.reserve(examples.size());
  b.row_splits.reserve(examples.size() + 1);
  b.row_splits.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    const Example& e = examples[static_cast<size_t>(i)];
    TROUPE_ASSERT(static_cast<int64_t>(e.features.size()) == d,
                  "collate: examples of different feature widths");
    std::copy(e.features.begin(), e.features.end(), b.features.data() + i * d);
    b.labels.push_back(e.label);
    b.classes.push_back(static_cast<int32_t>(e.label));
    b.ids.insert(b.ids.end(), e.ids.begin(), e.ids.end());
    if (e.values.empty()) {
      b.values.insert(b.values.end(), e.ids.size(), 1.0f);
    } else {
      b.values.insert(b.values.end(), e.values.begin(), e.values.end());
    }
    b.row_splits.push_back(static_cast<int64_t>(b.ids.size()));
  }
  return b;
}

Batch collate_classes(const std::vector<Example>& examples) {
  const auto n = static_cast<int64_t>(examples.size());
  const auto d = n == 0 ? 0 : static_cast<int64_t>(examples.front().features.size());
  const std::vector<FeatureSpec> specs = {{"features", ColumnKind::floats, {d}},
                                          {"label", ColumnKind::ints, {}}};
  Batch b;
  b.columns = make_columns(specs, examples.size());
  auto& features = b.columns[0].floats;
  auto& labels = b.columns[1].ints;
  for (const Example& e : examples) {
    TROUPE_ASSERT(static_cast<int64_t>(e.features.size()) == d,
                  "collate_classes: examples of different feature widths");
    features.insert(features.end(), e.features.begin(), e.features.end());
    labels.push_back(static_cast<int64_t>(e.label));
  }
  finish_columns(b.columns, specs, n);
  return b;
}

}  // namespace troupe::core
