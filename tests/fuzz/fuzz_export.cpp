// Model exports (troupe export, core/nn/ctr_export.hpp): read and checked, then loaded as a
// Predictor that scores one example.
#include "core/nn/ctr_export.hpp"
#include "fuzz_input.hpp"
#include "troupe/predictor.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe;
  fuzz::InputFile f(data, size);
  auto model = core::read_ctr_export(f.path());
  if (!model) return 0;
  // Small models only: a valid export may describe a big one, which is no bug to find.
  if (model->rows.size() > (1 << 20) || model->config.model.fields > 64 ||
      model->config.model.dense > 64)
    return 0;
  auto p = Predictor::from(std::move(*model));
  if (!p) return 0;
  core::Batch b;
  const int64_t fields = p->config().model.fields;
  for (int64_t i = 0; i < fields; ++i)
    b.ids.push_back(i);
  b.values.assign(b.ids.size(), 1.0f);
  b.features = core::Tensor(core::Shape{1, p->config().model.dense});
  b.labels = {1.0f};
  b.row_splits = {0, fields};
  (void)p->predict(b);
  return 0;
}
