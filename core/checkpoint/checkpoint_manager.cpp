#include "core/checkpoint/checkpoint_manager.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <system_error>
#include <tuple>

namespace troupe::core {

namespace fs = std::filesystem;

namespace {

constexpr const char* suffix = ".tckpt";

}  // namespace

CheckpointManager::CheckpointManager(std::string directory, int max_to_keep, std::string prefix)
    : directory_(std::move(directory)), max_to_keep_(max_to_keep), prefix_(std::move(prefix)) {}

Expected<std::string> CheckpointManager::save(const Checkpoint& ckpt, int64_t step) {
  if (step < 0) return make_error(Errc::invalid_argument, "checkpoint step must be >= 0");
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (ec) return make_error(Errc::io_error, directory_ + ": cannot create (" + ec.message() + ")");
  const std::string path = directory_ + "/" + prefix_ + "-" + std::to_string(step) + suffix;
  if (auto st = write_checkpoint(path, ckpt); !st) return st.error();
  remove_abandoned_writes(directory_);  // a writer killed mid-write left its temporary
  if (max_to_keep_ > 0) {
    auto all = checkpoints();
    const auto excess = static_cast<int64_t>(all.size()) - max_to_keep_;
    for (int64_t i = 0; i < excess; ++i)
      fs::remove(all[static_cast<size_t>(i)].second, ec);
  }
  return path;
}

std::vector<std::pair<int64_t, std::string>> CheckpointManager::checkpoints() const {
  // Write order, not step order: a directory reused by a new run (steps from 0 again) must
  // not have the new run's checkpoints taken for the oldest and deleted.
  std::vector<std::tuple<fs::file_time_type, int64_t, std::string>> found;
  std::error_code ec;
  const std::string head = prefix_ + "-";
  const std::string tail = suffix;
  for (fs::directory_iterator it(directory_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const char* first = name.data() + head.size();
    const char* last = name.data() + name.size() - tail.size();
    int64_t step = 0;
    auto [p, err] = std::from_chars(first, last, step);
    if (err != std::errc() || p != last) continue;
    std::error_code time_ec;
    const auto written = fs::last_write_time(it->path(), time_ec);
    if (time_ec) continue;  // deleted meanwhile
    found.emplace_back(written, step, it->path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::pair<int64_t, std::string>> out;
  out.reserve(found.size());
  for (auto& [written, step, path] : found)
    out.emplace_back(step, std::move(path));
  return out;
}

std::optional<std::string> CheckpointManager::latest() const {
  auto all = checkpoints();
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

Expected<std::pair<int64_t, Checkpoint>> CheckpointManager::restore_latest(
    std::vector<Error>* skipped, const std::function<Status(const Checkpoint&)>& accept) const {
  auto all = checkpoints();
  std::optional<Error> newest_damage;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    auto ckpt = read_checkpoint(it->second);
    Status taken = ckpt ? Status() : Status(ckpt.error());
    if (taken.ok() && accept) {
      taken = accept(*ckpt);
      if (!taken.ok())
        taken = make_error(taken.error().code, it->second + ": " + taken.error().message);
    }
    if (taken.ok()) return std::make_pair(it->first, std::move(*ckpt));
    if (!newest_damage) newest_damage = taken.error();
    if (skipped) skipped->push_back(taken.error());
  }
  if (!newest_damage) return make_error(Errc::not_found, directory_ + ": no checkpoint to restore");
  // Saved state that cannot be read is lost data, not an empty directory: a caller that
  // starts afresh on not_found must not do so here.
  return make_error(Errc::data_loss,
                    directory_ + ": none of " + std::to_string(all.size()) +
                        " checkpoints can be read; the newest: " + newest_damage->message);
}

}  // namespace troupe::core
