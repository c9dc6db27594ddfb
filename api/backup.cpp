#include "troupe/backup.hpp"

#include <filesystem>
#include <iostream>
#include <set>

#include "api/impl.hpp"
#include "core/checkpoint/checkpoint_manager.hpp"
#include "core/optimizer.hpp"

namespace troupe {

using core::Errc;
using core::make_error;

namespace {

namespace fs = std::filesystem;

// Keys of a backup checkpoint. Variable names may hold '/' and digits, so every key starts
// with its kind and ends with "#<shard>".
std::string shard_key(const net::Placement& p) {
  return net::shard_key(p.def);
}
std::string value_key(const std::string& shard) {
  return "value:" + shard;
}
std::string slot_key(const std::string& shard, size_t i) {
  return "slot" + std::to_string(i) + ":" + shard;
}
std::string iterations_key(const std::string& shard) {
  return "iterations:" + shard;
}
std::string optimizer_key(const std::string& shard) {
  return "optimizer:" + shard;
}

// Whether optimizer slots saved under the optimizer `saved` mean what this job's `now` (with
// `learning_rate`, for a name) keeps: the same text, or the same kind of optimizer with the
// same slots (a backup that names its optimizer, as jobs did before Keras's configs).
bool same_slots(const std::string& saved, const std::string& now, float learning_rate) {
  if (saved == now) return true;
  auto a = core::make_optimizer_from(saved, learning_rate);
  auto b = core::make_optimizer_from(now, learning_rate);
  return a && b && (*a)->name() == (*b)->name() && (*a)->slot_names() == (*b)->slot_names();
}

const char* const incarnation_file = "incarnation.tckpt";
const char* const prefix = "backup";

}  // namespace

BackupAndRestore::BackupAndRestore(ParameterServerStrategy& strategy, std::string directory,
                                   Options options, uint32_t incarnation)
    : strategy_(strategy),
      directory_(std::move(directory)),
      options_(options),
      incarnation_(incarnation) {}

BackupAndRestore::~BackupAndRestore() = default;

core::Expected<std::unique_ptr<BackupAndRestore>> BackupAndRestore::make(
    ParameterServerStrategy& strategy, std::string directory, Options options) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) return make_error(Errc::io_error, directory + ": " + ec.message());
  // The incarnation record: read, count on, written back atomically before any closure of
  // this chief exists.
  const std::string path = (fs::path(directory) / incarnation_file).string();
  int64_t previous = 0;
  if (fs::exists(path)) {
    auto record = core::read_checkpoint(path);
    if (!record) return record.error();
    auto it = record->ints.find("incarnation");
    if (it == record->ints.end() || it->second.size() != 1 || it->second[0] < 0)
      return make_error(Errc::data_loss, path + ": no incarnation number in it");
    previous = it->second[0];
  }
  // Closure ids keep 15 bits for it (CoordinatorOptions::incarnation); 0 is a chief
  // without a backup.
  const int64_t next = previous % 0x7fff + 1;
  core::Checkpoint record;
  record.ints["incarnation"] = {next};
  if (auto st = core::write_checkpoint(path, record); !st) return st.error();
  return std::unique_ptr<BackupAndRestore>(
      new BackupAndRestore(strategy, std::move(directory), options, static_cast<uint32_t>(next)));
}

core::Expected<std::optional<TrainingState>> BackupAndRestore::restore() {
  core::CheckpointManager manager(directory_, options_.max_to_keep, prefix);
  std::vector<core::Error> skipped;
  auto latest = manager.restore_latest(&skipped);
  for (const auto& e : skipped)
    std::cerr << "troupe: backup skipped: " << e.message << std::endl;
  if (!latest) {
    if (latest.error().code == Errc::not_found) return std::optional<TrainingState>{};
    return latest.error();  // every backup damaged: data_loss naming the newest
  }
  std::string file = directory_;
  for (const auto& [step, path] : manager.checkpoints())
    if (step == latest->first) file = path;
  core::Checkpoint& ckpt = latest->second;
  auto& m = strategy_.impl();

  // Check the whole backup against the job's variables before changing anything.
  auto mismatch = [&](const std::string& what) {
    return make_error(Errc::invalid_argument, "backup " + file + ": " + what);
  };
  std::vector<net::ShardState> states;
  std::set<std::string> used;
  for (const auto& p : m.placements) {
    net::ShardState s;
    // The shard as the backup names it: its own name, or the name an older backup held the
    // variable under (Options::former_names).
    std::string at = shard_key(p);
    if (!ckpt.tensors.count(value_key(at)))
      if (auto f = options_.former_names.find(p.def.name); f != options_.former_names.end())
        at = f->second + "#" + std::to_string(p.def.shard);
    auto value = ckpt.tensors.find(value_key(at));
    if (value == ckpt.tensors.end()) return mismatch("no value of " + shard_key(p));
    if (value->second.shape().to_vector() != p.def.shape)
      return mismatch(at + " has another shape than the variable " + shard_key(p));
    s.value = net::WireTensor::from(value->second);
    used.insert(value_key(at));
    for (size_t i = 0;; ++i) {
      auto slot = ckpt.tensors.find(slot_key(at, i));
      if (slot == ckpt.tensors.end()) break;
      s.slots.push_back(net::WireTensor::from(slot->second));
      used.insert(slot_key(at, i));
    }
    // Slots of another optimizer must not be dropped or misread: refuse, naming both.
    if (auto opt = ckpt.ints.find(optimizer_key(at)); opt != ckpt.ints.end()) {
      const auto saved = core::ints_text(opt->second).value_or("?");
      if (!same_slots(saved, p.def.optimizer, p.def.learning_rate))
        return mismatch(at + " was trained with optimizer '" + saved + "'; this job uses '" +
                        p.def.optimizer + "'");
    }
    auto it = ckpt.ints.find(iterations_key(at));
    if (it == ckpt.ints.end() || it->second.size() != 1)
      return mismatch("no iteration count of " + at);
    s.iterations = it->second[0];
    states.push_back(std::move(s));
  }
  for (const auto& [key, t] : ckpt.tensors)
    if (!used.count(key)) return mismatch("'" + key + "' is not a variable of this job");
  auto counter = [&](const char* name) -> core::Expected<int64_t> {
    auto it = ckpt.ints.find(name);
    if (it == ckpt.ints.end() || it->second.size() != 1)
      return mismatch(std::string("no ") + name + " counter");
    return it->second[0];
  };
  auto epoch = counter("epoch");
  if (!epoch) return epoch.error();
  auto step = counter("step");
  if (!step) return step.error();

  // The PS tasks check slot counts and shapes against their optimizers.
  for (size_t i = 0; i < states.size(); ++i) {
    const auto& p = m.placements[i];
    for (int32_t task : m.routing->live(p)) {  // every copy of a replicated shard
      auto ok = m.ask_ps<caf::ok_atom>(task, net::assign_atom::value, shard_key(p), states[i]);
      if (!ok)
        return make_error(ok.error().code, "restoring " + shard_key(p) + " on ps:" +
                                               std::to_string(task) + ": " + ok.error().message);
    }
  }
  return std::optional<TrainingState>(TrainingState{*epoch, *step});
}

core::Status BackupAndRestore::backup(const TrainingState& state) {
  auto& m = strategy_.impl();
  core::Checkpoint ckpt;
  for (const auto& p : m.placements) {
    const int task = m.serving(p);
    auto s = m.ask_ps<net::ShardState>(task, net::state_atom::value, shard_key(p));
    if (!s)
      return make_error(s.error().code, "backing up " + shard_key(p) + " from ps:" +
                                            std::to_string(task) + ": " + s.error().message);
    auto tensor = [&](const net::WireTensor& t) -> core::Expected<core::Tensor> {
      if (!t.consistent())
        return make_error(Errc::data_loss,
                          "ps:" + std::to_string(task) + " sent an inconsistent tensor");
      return core::Tensor::from_view(t.view());
    };
    auto value = tensor(s->value);
    if (!value) return value.error();
    ckpt.tensors.emplace(value_key(shard_key(p)), std::move(*value));
    for (size_t i = 0; i < s->slots.size(); ++i) {
      auto slot = tensor(s->slots[i]);
      if (!slot) return slot.error();
      ckpt.tensors.emplace(slot_key(shard_key(p), i), std::move(*slot));
    }
    ckpt.ints[iterations_key(shard_key(p))] = {s->iterations};
    ckpt.ints[optimizer_key(shard_key(p))] = core::text_ints(p.def.optimizer);
  }
  ckpt.ints["epoch"] = {state.epoch};
  ckpt.ints["step"] = {state.step};
  core::CheckpointManager manager(directory_, options_.max_to_keep, prefix);
  auto written = manager.save(ckpt, state.step);
  if (!written) return written.error();
  return {};
}

core::Status BackupAndRestore::finish() {
  core::CheckpointManager manager(directory_, options_.max_to_keep, prefix);
  std::error_code ec;
  for (const auto& [step, path] : manager.checkpoints()) {
    fs::remove(path, ec);
    if (ec) return make_error(Errc::io_error, path + ": " + ec.message());
  }
  fs::remove(fs::path(directory_) / incarnation_file, ec);
  if (ec) return make_error(Errc::io_error, directory_ + ": " + ec.message());
  // An earlier incarnation killed while it wrote a backup left that write's temporary.
  core::remove_abandoned_writes(directory_);
  fs::remove(directory_, ec);  // only when empty; other files are not ours to delete
  return {};
}

}  // namespace troupe
