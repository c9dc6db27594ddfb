#include "troupe/callbacks.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "api/model_state.hpp"
#include "core/json_text.hpp"
#include "core/keras/builtin_models.hpp"
#include "troupe/backup.hpp"

namespace troupe::callbacks {

namespace fs = std::filesystem;
using core::Errc;
using core::make_error;

namespace {

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

core::Status write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return make_error(Errc::io_error, tmp + ": cannot write");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return make_error(Errc::io_error, path + ": " + ec.message());
  return {};
}

std::optional<double> find(const Logs& logs, const std::string& name) {
  auto it = logs.find(name);
  if (it == logs.end()) return std::nullopt;
  return it->second;
}

bool improves(const std::string& metric, double value, const std::optional<double>& best,
              double min_delta) {
  if (!best) return true;
  return lower_is_better(metric) ? value < *best - min_delta : value > *best + min_delta;
}

}  // namespace

bool lower_is_better(const std::string& metric) {
  return metric.find("loss") != std::string::npos;
}

// ---- ModelCheckpoint ------------------------------------------------------------------

ModelCheckpoint::ModelCheckpoint(std::string directory, Options options)
    : manager_(std::move(directory), options.max_to_keep), options_(std::move(options)) {}

core::Status ModelCheckpoint::on_train_begin(FitState& s) {
  if (!s.is_chief) return {};
  // Training (again, or resumed): the last checkpoint is not final any more.
  std::error_code ec;
  fs::remove(manager_.directory() + "/" + final_marker, ec);
  best_.reset();
  return {};
}

core::Status ModelCheckpoint::save(FitState& s, const Logs&) {
  // The variables as the PS tasks hold them now (a dynamic table read in pages).
  auto weights = s.model->read_weights();
  if (!weights) return weights.error();
  core::Checkpoint& ckpt = *weights;
  ckpt.ints["step"] = {s.step};
  ckpt.ints["epoch"] = {s.epoch};
  auto path = manager_.save(ckpt, s.step);
  if (!path) return path.error();
  last_step_ = s.step;
  last_path_ = *path;
  ++saves_;
  return {};
}

core::Status ModelCheckpoint::on_train_batch_end(FitState& s, const Logs& logs) {
  if (!s.is_chief) return {};
  return save(s, logs);
}

core::Status ModelCheckpoint::on_epoch_end(FitState& s, const Logs& logs) {
  if (!s.is_chief || options_.save_freq_steps > 0) return {};
  if (options_.save_best_only) {
    auto v = find(logs, options_.monitor);
    if (!v) {
      std::cerr << "ModelCheckpoint: '" << options_.monitor
                << "' is not among the epoch's metrics; not saving" << std::endl;
      return {};
    }
    if (!improves(options_.monitor, *v, best_, 0.0)) return {};
    best_ = *v;
  }
  return save(s, logs);
}

core::Status ModelCheckpoint::on_train_end(FitState& s, const Logs& logs) {
  if (!s.is_chief) return {};
  if (!options_.save_best_only && last_step_ != s.step)
    if (auto st = save(s, logs); !st) return st;
  if (last_step_ < 0) return {};
  const nlohmann::json marker{{"step", last_step_}, {"path", last_path_}};
  return write_file_atomically(manager_.directory() + "/" + final_marker,
                               core::json_text(marker) + "\n");
}

// ---- BackupAndRestoreCallback ---------------------------------------------------------

namespace {
constexpr const char* local_prefix = "backup";

// The optimizer a model trains with (its compiled one), as backups name it.
std::string optimizer_name(const Model::State& st) {
  return st.optimizer ? st.optimizer->name() : std::string("?");
}

std::string slot_key(const std::string& param, size_t i) {
  return "slot/" + param + "/" + std::to_string(i);
}
}  // namespace

BackupAndRestoreCallback::BackupAndRestoreCallback(std::string directory, Options options)
    : directory_(std::move(directory)), options_(options) {}
BackupAndRestoreCallback::~BackupAndRestoreCallback() = default;

core::Status BackupAndRestoreCallback::on_train_begin(FitState& s) {
  Model& model = *s.model;
  // Mirrored: the chief restores; the others take its state when fit() mirrors it.
  if (!s.is_chief) return {};
  std::optional<TrainingState> at;
  if (s.strategy == FitStrategy::parameter_server) {
    if (!model.spec().keras_options.dynamic_tables.empty())
      return make_error(Errc::invalid_argument,
                        "BackupAndRestore: model '" + model.spec().name +
                            "' has a dynamic table, which a chief's backup does not hold; "
                            "snapshot the PS tasks instead (--ps-snapshot-dir)");
    if (s.coordinator_options == nullptr)
      return make_error(Errc::invalid_argument,
                        "BackupAndRestore must be given to the model's first fit(): the "
                        "coordinator it makes needs this chief's incarnation");
    // The built-in CTR model's form also takes a backup of its programs' names (as a job of
    // ModelSpec::ctr wrote it).
    troupe::BackupAndRestore::Options options;
    if (model.status().ok())
      if (auto ctr = core::keras::ctr_form_config(model.graph()))
        options.former_names = core::keras::ctr_former_names(*ctr);
    auto b = troupe::BackupAndRestore::make(*model.strategy(), directory_, options);
    if (!b) return b.error();
    ps_ = std::move(*b);
    auto restored = ps_->restore();
    if (!restored) return restored.error();
    at = *restored;
    s.coordinator_options->incarnation = ps_->incarnation();
  } else {
    core::CheckpointManager m(directory_, 2, local_prefix);
    if (!m.checkpoints().empty()) {
      std::vector<core::Error> skipped;
      auto r = m.restore_latest(&skipped);
      for (const auto& e : skipped)
        std::cerr << "BackupAndRestore: skipped a damaged backup: " << e.to_string() << std::endl;
      if (!r) return r.error();
      const core::Checkpoint& c = r->second;
      auto& st = model.state();
      // A backup of another optimizer would lose (or misread) its slots: refuse, naming
      // both. Backups without the name are checked by their slot count.
      const std::string ours = optimizer_name(st);
      if (auto opt = c.ints.find("optimizer"); opt != c.ints.end()) {
        const auto saved = core::ints_text(opt->second).value_or("?");
        if (saved != ours)
          return make_error(Errc::invalid_argument,
                            directory_ + ": the backup was trained with optimizer '" + saved +
                                "'; this fit() uses '" + ours + "'");
      }
      for (size_t i = 0; i < st.slots.size(); ++i)
        if (c.tensors.count(slot_key(st.replica.names[i], st.slots[i].slots.size())))
          return make_error(Errc::invalid_argument,
                            directory_ + ": the backup holds more optimizer slots of '" +
                                st.replica.names[i] + "' than optimizer '" + ours + "' keeps");
      if (auto ok = model.set_weights(c); !ok) return ok;
      auto iters = c.ints.find("iterations");
      for (size_t i = 0; i < st.slots.size(); ++i) {
        const auto& name = st.replica.names[i];
        for (size_t k = 0; k < st.slots[i].slots.size(); ++k) {
          auto t = c.tensors.find(slot_key(name, k));
          if (t == c.tensors.end() || t->second.shape() != st.slots[i].slots[k].shape())
            return make_error(Errc::invalid_argument, directory_ +
                                                          ": the backup has no matching slot " +
                                                          std::to_string(k) + " of '" + name + "'");
          st.slots[i].slots[k].set(t->second);  // on the slot's own device
        }
        if (iters != c.ints.end() && i < iters->second.size())
          st.slots[i].iterations = iters->second[i];
      }
      auto get = [&](const char* k) {
        auto it = c.ints.find(k);
        return it == c.ints.end() || it->second.empty() ? int64_t{0} : it->second[0];
      };
      at = TrainingState{get("epoch"), get("step")};
    }
  }
  if (at) {
    resumed_ = true;
    s.initial_epoch = at->epoch;
    s.initial_step = at->step;
    std::cerr << "BackupAndRestore: resuming at epoch " << at->epoch + 1 << ", step " << at->step
              << std::endl;
  }
  return {};
}

core::Status BackupAndRestoreCallback::save(FitState& s, int64_t epoch) {
  ++backups_;
  if (ps_) return ps_->backup({epoch, s.step});
  Model& model = *s.model;
  auto& st = model.state();
  core::Checkpoint c = model.weights();
  std::vector<int64_t> iterations;
  for (size_t i = 0; i < st.slots.size(); ++i) {
    for (size_t k = 0; k < st.slots[i].slots.size(); ++k)
      c.tensors[slot_key(st.replica.names[i], k)] = st.slots[i].slots[k].to(core::Device::cpu());
    iterations.push_back(st.slots[i].iterations);
  }
  c.ints["iterations"] = iterations;
  c.ints["optimizer"] = core::text_ints(optimizer_name(st));
  c.ints["epoch"] = {epoch};
  c.ints["step"] = {s.step};
  core::CheckpointManager m(directory_, 2, local_prefix);
  auto path = m.save(c, s.step);
  if (!path) return path.error();
  return {};
}

core::Status BackupAndRestoreCallback::on_train_batch_end(FitState& s, const Logs&) {
  if (!s.is_chief) return {};
  return save(s, s.epoch);
}

core::Status BackupAndRestoreCallback::on_epoch_end(FitState& s, const Logs&) {
  if (!s.is_chief || options_.save_freq_steps > 0) return {};
  return save(s, s.epoch + 1);  // the epoch is done: resume at the next one
}

core::Status BackupAndRestoreCallback::on_train_end(FitState& s, const Logs&) {
  if (!s.is_chief) return {};
  // Trained: the backup is removed (TensorFlow deletes it at the end of fit()).
  if (ps_) return ps_->finish();
  core::CheckpointManager m(directory_, 2, local_prefix);
  for (const auto& [step, path] : m.checkpoints()) {
    std::error_code ec;
    fs::remove(path, ec);
    if (ec) return make_error(Errc::io_error, path + ": " + ec.message());
  }
  std::error_code ec;
  fs::remove(directory_, ec);  // when nothing else is in it, as the PS backup does
  return {};
}

// ---- TensorBoard ----------------------------------------------------------------------

TensorBoard::TensorBoard(std::string logdir, Options options)
    : options_(options), train_(logdir + "/train"), validation_(logdir + "/validation") {}

core::Status TensorBoard::on_train_batch_end(FitState& s, const Logs& logs) {
  if (!s.is_chief) return {};
  for (const auto& [k, v] : logs)
    if (auto st = train_.add_scalar("batch_" + k, static_cast<float>(v), s.step); !st) return st;
  return {};
}

core::Status TensorBoard::on_epoch_end(FitState& s, const Logs& logs) {
  if (!s.is_chief) return {};
  for (const auto& [k, v] : logs) {
    const bool val = k.rfind("val_", 0) == 0;
    auto& w = val ? validation_ : train_;
    const std::string tag = "epoch_" + (val ? k.substr(4) : k);
    if (auto st = w.add_scalar(tag, static_cast<float>(v), s.epoch); !st) return st;
  }
  return {};
}

// ---- MetricsLog -----------------------------------------------------------------------

MetricsLog::MetricsLog(std::string path) : path_(std::move(path)) {}

core::Status MetricsLog::on_epoch_end(FitState& s, const Logs& logs) {
  if (!s.is_chief) return {};
  if (!out_.is_open()) {
    const auto parent = fs::path(path_).parent_path();
    std::error_code ec;
    if (!parent.empty()) fs::create_directories(parent, ec);
    out_.open(path_, std::ios::app);
    if (!out_) return make_error(Errc::io_error, path_ + ": cannot open for appending");
  }
  nlohmann::json j{
      {"event", "epoch"}, {"epoch", s.epoch}, {"step", s.step}, {"wall_time", wall_time()}};
  for (const auto& [k, v] : logs)
    j[k] = v;
  out_ << core::json_text(j) << "\n" << std::flush;
  if (!out_) return make_error(Errc::io_error, path_ + ": write failed");
  return {};
}

// ---- EarlyStopping --------------------------------------------------------------------

EarlyStopping::EarlyStopping(Options options) : options_(std::move(options)) {}

core::Status EarlyStopping::on_train_begin(FitState&) {
  best_.reset();
  wait_ = 0;
  stopped_epoch_.reset();
  return {};
}

core::Status EarlyStopping::on_epoch_end(FitState& s, const Logs& logs) {
  auto v = find(logs, options_.monitor);
  if (!v) {
    if (!warned_)
      std::cerr << "EarlyStopping: '" << options_.monitor
                << "' is not among the epoch's metrics; it cannot stop training" << std::endl;
    warned_ = true;
    return {};
  }
  if (improves(options_.monitor, *v, best_, options_.min_delta)) {
    best_ = *v;
    wait_ = 0;
    return {};
  }
  // Keras: stop once `patience` epochs in a row did not improve (0 behaves as 1).
  if (++wait_ >= std::max<int64_t>(1, options_.patience)) {
    s.stop_training = true;
    stopped_epoch_ = s.epoch;
  }
  return {};
}

// ---- ProgressDisplay ------------------------------------------------------------------

ProgressDisplay::ProgressDisplay(std::ostream& out, Options options)
    : out_(out),
      options_(options),
      terminal_(options.terminal.value_or(&out == &std::cerr && ::isatty(STDERR_FILENO) != 0)) {}
ProgressDisplay::ProgressDisplay() : ProgressDisplay(std::cerr, Options{}) {}

core::Status ProgressDisplay::on_epoch_begin(FitState& s) {
  last_ = std::chrono::steady_clock::now();
  drawn_ = false;
  epoch_steps_ = 0;
  if (options_.style != Style::troupe) {
    last_ -= std::chrono::seconds(1);  // Keras's bar: drawn at the epoch's first step
    if (s.options->epochs > 1)
      out_ << "Epoch " << s.epoch + 1 << "/" << s.options->epochs << "\n" << std::flush;
  }
  return {};
}

namespace {

// Keras's forms: a time per step in s, ms or us; a value with 4 decimals (in e-notation
// when it is that small); the bar, 20 wide.
std::string per_step(double seconds) {
  char buf[32];
  if (seconds >= 1)
    std::snprintf(buf, sizeof buf, "%.0fs/step", seconds);
  else if (seconds >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.0fms/step", seconds * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0fus/step", seconds * 1e6);
  return buf;
}

std::string keras_value(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::abs(v) > 1e-3 ? "%.4f" : "%.4e", v);
  return buf;
}

std::string keras_bar(int64_t done, int64_t total) {
  constexpr int64_t width = 20;
  const int64_t filled = total > 0 ? std::min(width, width * done / total) : 0;
  std::string bar;
  for (int64_t i = 0; i < width; ++i)
    bar += i < filled ? "\u2501" : "\u2500";  // heavy where done, light where to come
  return bar;
}

std::string steps_of(int64_t done, int64_t total) {
  if (total <= 0) return std::to_string(done) + "/Unknown";
  const std::string t = std::to_string(total);
  std::string d = std::to_string(done);
  return std::string(t.size() > d.size() ? t.size() - d.size() : 0, ' ') + d + "/" + t;
}

}  // namespace

void ProgressDisplay::keras_live(const FitState& s, const Progress& p) {
  if (options_.style != Style::keras_bar || !terminal_) return;  // Keras: live on a tty only
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double step_s = p.epoch_step > 0 ? p.elapsed_s / static_cast<double>(p.epoch_step) : 0;
  std::string line = steps_of(p.epoch_step, s.steps_per_epoch) + " ";
  if (s.steps_per_epoch > 0) {
    line += keras_bar(p.epoch_step, s.steps_per_epoch) + " ";
    const double eta = step_s * static_cast<double>(s.steps_per_epoch - p.epoch_step);
    line += std::to_string(static_cast<int64_t>(eta)) + "s ";
  } else {
    line += std::to_string(static_cast<int64_t>(p.elapsed_s)) + "s ";
  }
  line += per_step(step_s) + " - loss: " + keras_value(p.epoch_loss);  // as Keras: the mean
  out_ << "\r" << line << "\x1b[K" << std::flush;
  drawn_ = true;
}

core::Status ProgressDisplay::keras_epoch_end(FitState& s, const Logs& logs) {
  const auto it = logs.find("epoch_s");
  const double epoch_s = it != logs.end() ? it->second : 0.0;
  const int64_t steps = s.steps_per_epoch > 0 ? s.steps_per_epoch : epoch_steps_;
  const double step_s = steps > 0 ? epoch_s / static_cast<double>(steps) : 0.0;
  std::string line = steps_of(steps, steps);
  const std::string elapsed = std::to_string(static_cast<int64_t>(std::lround(epoch_s))) + "s";
  if (options_.style == Style::keras_bar)
    line += " " + keras_bar(steps, steps) + " " + elapsed + " " + per_step(step_s);
  else
    line += " - " + elapsed + " - " + per_step(step_s);
  for (const auto& [k, v] : logs)  // Troupe's own figures are not Keras's logs
    if (k != "epoch_s" && k != "examples_per_sec") line += " - " + k + ": " + keras_value(v);
  if (terminal_ && drawn_) out_ << "\r";
  out_ << line << (terminal_ ? "\x1b[K" : "") << "\n" << std::flush;
  return {};
}

void ProgressDisplay::on_progress(const FitState& s, const Progress& p) {
  epoch_steps_ = p.epoch_step;
  if (options_.style != Style::troupe) return keras_live(s, p);
  const auto now = std::chrono::steady_clock::now();
  const auto every = terminal_ ? std::min<std::chrono::milliseconds>(options_.interval,
                                                                     std::chrono::milliseconds(100))
                               : options_.interval;
  const bool epoch_done = s.steps_per_epoch > 0 && p.epoch_step >= s.steps_per_epoch;
  if (now - last_ < every || epoch_done) return;
  last_ = now;
  std::ostringstream line;
  line << "epoch " << s.epoch + 1 << "/" << s.options->epochs << "  step " << p.epoch_step;
  if (s.steps_per_epoch > 0) {
    line << "/" << s.steps_per_epoch;
    if (terminal_) {
      const int width = 24;
      const int filled = static_cast<int>(width * p.epoch_step / s.steps_per_epoch);
      line << " [" << std::string(static_cast<size_t>(filled), '=') << '>'
           << std::string(static_cast<size_t>(width - filled), '.') << ']';
    }
  }
  line << std::fixed << std::setprecision(0) << "  " << p.examples_per_sec << " examples/s"
       << std::setprecision(4) << "  loss " << p.loss;
  if (s.steps_per_epoch > 0 && p.epoch_step > 0) {
    const double eta = p.elapsed_s / static_cast<double>(p.epoch_step) *
                       static_cast<double>(s.steps_per_epoch - p.epoch_step);
    line << std::setprecision(0) << "  ETA " << std::ceil(eta) << "s";
  }
  if (terminal_) {
    out_ << "\r" << line.str() << "\x1b[K" << std::flush;
    drawn_ = true;
  } else {
    out_ << line.str() << "\n" << std::flush;
  }
}

core::Status ProgressDisplay::on_epoch_end(FitState& s, const Logs& logs) {
  if (options_.style != Style::troupe) return keras_epoch_end(s, logs);
  std::ostringstream line;
  line << "epoch " << s.epoch + 1 << "/" << s.options->epochs << "  step " << s.step;
  line << std::setprecision(4);
  for (const auto& [k, v] : logs)
    if (k != "epoch_s") line << "  " << k << " " << v;
  auto it = logs.find("epoch_s");
  if (it != logs.end()) line << std::fixed << std::setprecision(1) << "  " << it->second << "s";
  if (terminal_ && drawn_) out_ << "\r";
  out_ << line.str() << (terminal_ ? "\x1b[K" : "") << "\n" << std::flush;
  return {};
}

}  // namespace troupe::callbacks
