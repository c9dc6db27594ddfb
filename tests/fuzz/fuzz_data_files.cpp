// Data files: IDX (Fashion-MNIST), LibSVM, Criteo and CSV text, TFRecord with the
// tf.train.Example in each record; TFRecord and text lines also as a stream (a pipe: no size).
#include "core/data/idx.hpp"
#include "core/data/record_io.hpp"
#include "core/data/sparse_input.hpp"
#include "core/data/text_formats.hpp"
#include "core/data/tf_example.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe;
  fuzz::InputFile f(data, size);
  (void)core::read_idx(f.path());
  (void)core::read_libsvm(f.path());
  core::CriteoOptions criteo;
  criteo.buckets_per_field = 1000;
  (void)core::read_criteo(f.path(), criteo);
  (void)core::read_csv(f.path());
  if (auto reader = core::TFRecordReader::open(f.path())) {
    core::RawRecord record;
    for (int i = 0; i < 64; ++i) {
      auto more = reader->next(record);
      if (!more || !*more) break;
      (void)core::parse_example(record.data);
    }
  }
  {
    fuzz::InputPipe pipe(data, size);
    if (auto reader = core::TFRecordReader::open(pipe.path())) {
      core::RawRecord record;
      for (int i = 0; i < 64; ++i) {
        auto more = reader->next(record);
        if (!more || !*more) break;
      }
    }
  }
  {
    fuzz::InputPipe pipe(data, size);
    if (auto reader = core::LineReader::open(pipe.path(), 4096)) {
      core::RawRecord record;
      core::Example e;
      for (int i = 0; i < 256; ++i) {
        auto more = reader->next(record);
        if (!more || !*more) break;
        (void)core::parse_criteo_line(record, criteo, e);
      }
    }
  }
  (void)core::parse_example(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
