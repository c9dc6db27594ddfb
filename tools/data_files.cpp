#include "tools/data_files.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "core/data/guard.hpp"

namespace troupe::tools {

namespace fs = std::filesystem;
using core::Errc;
using core::make_error;

// The files of --data / --validation: each file as given, each directory's files sorted
// (for IDX, a directory's `train-*` files for --data and `t10k-*` ones for --validation,
// as Fashion-MNIST's are named).
core::Expected<std::vector<std::string>> expand_data_files(const std::vector<std::string>& paths,
                                                           const std::string& format,
                                                           bool validation) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      if (!fs::exists(p, ec))
        return make_error(Errc::not_found, "data file '" + p + "' does not exist");
      files.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(p, ec)) {
      if (!e.is_regular_file()) continue;
      const std::string name = e.path().filename().string();
      if (format == "idx" && name.rfind(validation ? "t10k-" : "train-", 0) != 0) continue;
      found.push_back(e.path().string());
    }
    if (ec) return make_error(Errc::io_error, "data directory '" + p + "': " + ec.message());
    std::sort(found.begin(), found.end());
    if (found.empty())
      return make_error(Errc::not_found, "data directory '" + p + "' has no files");
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

// A format from the files' names when --format is not given.
core::Expected<core::DataFormat> data_format_of(const std::string& given,
                                                const std::vector<std::string>& paths) {
  if (!given.empty()) return core::parse_data_format(given);
  for (const auto& p : paths) {
    const std::string name = fs::path(p).filename().string();
    auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
    if (has(".tfrecord")) return core::DataFormat::tfrecord;
    if (has(".csv")) return core::DataFormat::csv;
    if (has("-ubyte") || has("fashion-mnist") || has("fashion_mnist")) return core::DataFormat::idx;
    if (has(".txt") || has(".tsv")) return core::DataFormat::criteo;
  }
  return make_error(Errc::invalid_argument,
                    "cannot tell the data's format from its name: give --format "
                    "tfrecord|criteo|idx|csv");
}

core::Status check_data_files(const std::vector<std::string>& files, core::DataFormat format,
                              const std::vector<core::FeatureSpec>& specs) {
  if (files.empty()) return make_error(Errc::invalid_argument, "no data files");
  for (const auto& f : files) {
    if (format == core::DataFormat::idx) break;  // IDX: `image` and `label` by the files' ranks
    auto names = core::feature_names(f, format);
    if (!names) return names.error();
    for (const auto& s : specs)
      if (std::find(names->begin(), names->end(), s.name) == names->end()) {
        std::string have;
        for (const auto& n : *names)
          have += (have.empty() ? "" : ", ") + n;
        return make_error(Errc::invalid_argument, "the model reads '" + s.name + "', which " + f +
                                                      " does not have (it has " + have + ")");
      }
  }
  core::NamedInputOptions first;
  first.format = format;
  first.features = specs;
  first.batch = 1;
  first.prefetch = 0;
  first.drop_remainder = false;
  first.epochs = 1;
  std::optional<core::Batch> one;
  return core::guard_user_data(files.front(), [&] {
    const std::vector<std::string> head =
        format == core::DataFormat::idx ? files : std::vector<std::string>{files.front()};
    one = core::named_input(head, core::InputContext{}, first).make_iterator()->next();
  });
}

}  // namespace troupe::tools
