#include "python/src/arrays.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include "core/data/record_io.hpp"
#include "python/src/errors.hpp"

namespace troupe::python {

namespace {

std::string shape_text(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t d = 0; d < a.ndim(); ++d)
    s += (d ? ", " : "") + std::to_string(a.shape(d));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

std::string spec_shape_text(const core::FeatureSpec& spec) {
  std::string s = "(None";
  for (auto d : spec.shape)
    s += ", " + std::to_string(d);
  return s + ")";
}

// The values of `a` as the spec's kind, appended to `column`.
void read_values(const py::array& a, const core::FeatureSpec& spec, core::Column& column,
                 const std::string& what) {
  const char kind = a.dtype().kind();
  const std::string dtype = py::str(a.dtype()).cast<std::string>();
  const auto refuse = [&](const std::string& why) {
    invalid(what + ": '" + spec.name + "' is " + dtype + ", " + why);
  };
  const bool numeric = kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b';
  switch (spec.kind) {
    case core::ColumnKind::floats: {
      if (!numeric) refuse("where the model reads numbers");
      auto f = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
      column.floats.assign(f.data(), f.data() + f.size());
      return;
    }
    case core::ColumnKind::ints: {
      if (!numeric) refuse("where the model reads integer ids");
      if (kind == 'f') {  // ids written as floats: whole numbers only
        auto d = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
        column.ints.reserve(static_cast<size_t>(d.size()));
        for (py::ssize_t i = 0; i < d.size(); ++i) {
          const double v = d.data()[i];
          if (!std::isfinite(v) || v != std::floor(v))
            refuse("holding " + std::to_string(v) + ", where the model reads integer ids");
          column.ints.push_back(static_cast<int64_t>(v));
        }
        return;
      }
      auto i64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
      column.ints.assign(i64.data(), i64.data() + i64.size());
      return;
    }
    case core::ColumnKind::strings: {
      if (kind != 'U' && kind != 'S' && kind != 'O') refuse("where the model reads strings");
      py::object flat = a.attr("ravel")();
      for (py::handle item : flat) {
        if (py::isinstance<py::bytes>(item)) {
          column.strings.push_back(item.cast<std::string>());
        } else if (py::isinstance<py::str>(item)) {
          column.strings.push_back(item.cast<std::string>());
        } else {
          refuse("holding " + py::repr(item).cast<std::string>() +
                 ", where the model reads strings");
        }
      }
      return;
    }
  }
}

}  // namespace

ArrayTable read_arrays(const py::dict& arrays, const std::vector<core::FeatureSpec>& specs,
                       const std::string& what) {
  ArrayTable t;
  t.specs = specs;
  py::module_ np = py::module_::import("numpy");
  std::vector<py::array> given;
  for (const auto& spec : specs) {
    if (!arrays.contains(spec.name)) {
      std::string have;
      for (auto kv : arrays)
        have += (have.empty() ? "" : ", ") + py::str(kv.first).cast<std::string>();
      invalid(what + " has no '" + spec.name + "', which the model reads (it has " +
              (have.empty() ? std::string("nothing") : have) + ")");
    }
    py::array a = np.attr("asarray")(arrays[py::str(spec.name)]);
    if (a.ndim() < 1)
      invalid(what + ": '" + spec.name + "' is a scalar, not one value per example");
    int64_t per = 1;
    for (py::ssize_t d = 1; d < a.ndim(); ++d)
      per *= a.shape(d);
    if (per != spec.per_example())
      invalid(what + ": '" + spec.name + "' has shape " + shape_text(a) +
              ", where the model reads " + spec_shape_text(spec) + " (" +
              std::to_string(spec.per_example()) + " values per example, not " +
              std::to_string(per) + ")");
    if (given.empty()) {
      t.examples = a.shape(0);
    } else if (a.shape(0) != t.examples) {
      invalid(what + ": '" + spec.name + "' has " + std::to_string(a.shape(0)) + " examples and '" +
              specs.front().name + "' " + std::to_string(t.examples));
    }
    given.push_back(a);
  }
  t.columns = core::make_columns(specs, static_cast<size_t>(t.examples));
  for (size_t i = 0; i < specs.size(); ++i)
    read_values(given[i], specs[i], t.columns[i], what);
  core::finish_columns(t.columns, specs, t.examples);
  return t;
}

core::Batch gather(const ArrayTable& table, const std::vector<int64_t>& rows) {
  auto columns = core::make_columns(table.specs, rows.size());
  for (size_t c = 0; c < columns.size(); ++c) {
    const auto per = static_cast<size_t>(table.specs[c].per_example());
    const core::Column& from = table.columns[c];
    core::Column& to = columns[c];
    for (int64_t r : rows) {
      const size_t at = static_cast<size_t>(r) * per;
      switch (from.kind) {
        case core::ColumnKind::floats:
          to.floats.insert(to.floats.end(), from.floats.begin() + at,
                           from.floats.begin() + at + per);
          break;
        case core::ColumnKind::ints:
          to.ints.insert(to.ints.end(), from.ints.begin() + at, from.ints.begin() + at + per);
          break;
        case core::ColumnKind::strings:
          to.strings.insert(to.strings.end(), from.strings.begin() + at,
                            from.strings.begin() + at + per);
          break;
      }
    }
  }
  core::finish_columns(columns, table.specs, static_cast<int64_t>(rows.size()));
  core::Batch b;
  b.columns = std::move(columns);
  return b;
}

core::Dataset<core::Batch> table_batches(std::shared_ptr<const ArrayTable> table, size_t batch,
                                         bool shuffle, uint64_t seed, bool drop_remainder,
                                         const core::InputContext& shard) {
  auto iterators = std::make_shared<std::atomic<uint64_t>>(0);
  const int64_t n = std::max<int64_t>(1, shard.num_input_pipelines);
  const int64_t first = shard.input_pipeline_id;
  return core::Dataset<core::Batch>([=] {
    auto order = std::make_shared<std::vector<int64_t>>();
    for (int64_t row = first; row < table->examples; row += n)
      order->push_back(row);
    if (shuffle) {
      std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + (*iterators)++);
      std::shuffle(order->begin(), order->end(), rng);
    }
    auto at = std::make_shared<size_t>(0);
    return core::detail::make_fn_iterator<core::Batch>([=]() -> std::optional<core::Batch> {
      const size_t left = order->size() - *at;
      if (left == 0 || (drop_remainder && left < batch)) return std::nullopt;
      const size_t n = std::min(batch, left);
      std::vector<int64_t> rows(order->begin() + static_cast<std::ptrdiff_t>(*at),
                                order->begin() + static_cast<std::ptrdiff_t>(*at + n));
      *at += n;
      return gather(*table, rows);
    });
  });
}

std::vector<core::Batch> all_batches(const ArrayTable& table, size_t batch) {
  std::vector<core::Batch> out;
  for (int64_t at = 0; at < table.examples; at += static_cast<int64_t>(batch)) {
    std::vector<int64_t> rows(
        static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(batch), table.examples - at)));
    std::iota(rows.begin(), rows.end(), at);
    out.push_back(gather(table, rows));
  }
  return out;
}

int64_t write_tfrecord(const std::string& path, const py::dict& arrays) {
  std::vector<core::FeatureSpec> specs;
  py::module_ np = py::module_::import("numpy");
  for (auto kv : arrays) {
    core::FeatureSpec spec;
    spec.name = py::str(kv.first).cast<std::string>();
    py::array a = np.attr("asarray")(kv.second);
    const char kind = a.dtype().kind();
    if (kind == 'f') {
      spec.kind = core::ColumnKind::floats;
    } else if (kind == 'i' || kind == 'u' || kind == 'b') {
      spec.kind = core::ColumnKind::ints;
    } else if (kind == 'U' || kind == 'S' || kind == 'O') {
      spec.kind = core::ColumnKind::strings;
    } else {
      invalid("write_tfrecord: '" + spec.name + "' is " + py::str(a.dtype()).cast<std::string>() +
              ", not numbers or strings");
    }
    for (py::ssize_t d = 1; d < a.ndim(); ++d)
      spec.shape.push_back(a.shape(d));
    specs.push_back(spec);
  }
  if (specs.empty()) invalid("write_tfrecord: no arrays to write");
  const ArrayTable table = read_arrays(arrays, specs, "write_tfrecord");
  py::gil_scoped_release release;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (int64_t row = 0; row < table.examples && out; ++row)
    out << core::frame_record(core::encode_tf_example(table.columns, row));
  out.close();
  if (!out) throw TroupeError(core::Errc::io_error, "write_tfrecord: cannot write " + path);
  return table.examples;
}

py::array_t<float> to_numpy(std::vector<float>&& values, const std::vector<int64_t>& shape) {
  auto* owned = new std::vector<float>(std::move(values));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  return py::array_t<float>(dims, owned->data(), owner);
}

}  // namespace troupe::python
