#include "tools/chaos.hpp"

#include <signal.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iostream>
#include <limits>
#include <thread>

namespace troupe::tools {

namespace {

core::Error bad(const std::string& spec, const std::string& why) {
  return core::make_error(
      core::Errc::invalid_argument,
      "chaos spec '" + spec + "': " + why +
          " (expected ACTION:TYPE:INDEX@TIME[+DURATION], e.g. kill:worker:1@5s)");
}

// "1.5s" or "800ms" -> milliseconds.
bool parse_time(const std::string& text, std::chrono::milliseconds& out) {
  double scale = 0;
  std::string number;
  if (text.size() > 2 && text.compare(text.size() - 2, 2, "ms") == 0) {
    scale = 1.0;
    number = text.substr(0, text.size() - 2);
  } else if (text.size() > 1 && text.back() == 's') {
    scale = 1000.0;
    number = text.substr(0, text.size() - 1);
  } else {
    return false;
  }
  double v = 0;
  auto [p, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (ec != std::errc() || p != number.data() + number.size() || v < 0) return false;
  out = std::chrono::milliseconds(static_cast<int64_t>(v * scale));
  return true;
}

}  // namespace

std::string ChaosEvent::to_string() const {
  std::string s = (action == Action::kill ? "kill:" : "stop:") + task.to_string() + "@" +
                  std::to_string(at.count()) + "ms";
  if (action == Action::stop) s += "+" + std::to_string(duration.count()) + "ms";
  return s;
}

core::Expected<ChaosEvent> parse_chaos(const std::string& spec) {
  ChaosEvent e;
  const auto at = spec.find('@');
  if (at == std::string::npos) return bad(spec, "no '@TIME'");
  const std::string head = spec.substr(0, at), when = spec.substr(at + 1);
  const auto c1 = head.find(':'), c2 = head.find(':', c1 == std::string::npos ? 0 : c1 + 1);
  if (c1 == std::string::npos || c2 == std::string::npos) return bad(spec, "no ACTION:TYPE:INDEX");
  const std::string action = head.substr(0, c1), type = head.substr(c1 + 1, c2 - c1 - 1),
                    index = head.substr(c2 + 1);
  if (action == "kill") {
    e.action = ChaosEvent::Action::kill;
  } else if (action == "stop") {
    e.action = ChaosEvent::Action::stop;
  } else {
    return bad(spec, "unknown action '" + action + "'");
  }
  if (type != "worker" && type != "ps" && type != "chief" && type != "evaluator")
    return bad(spec, "unknown task type '" + type + "'");
  int idx = -1;
  auto [p, ec] = std::from_chars(index.data(), index.data() + index.size(), idx);
  if (ec != std::errc() || p != index.data() + index.size() || idx < 0)
    return bad(spec, "bad index '" + index + "'");
  e.task = {type, idx};
  const auto plus = when.find('+');
  if (!parse_time(when.substr(0, plus), e.at))
    return bad(spec, "bad time '" + when.substr(0, plus) + "'");
  if (plus != std::string::npos) {
    if (e.action != ChaosEvent::Action::stop) return bad(spec, "only stop takes a +DURATION");
    if (!parse_time(when.substr(plus + 1), e.duration)) return bad(spec, "bad duration");
  } else if (e.action == ChaosEvent::Action::stop) {
    return bad(spec, "stop needs a +DURATION");
  }
  return e;
}

ChaosInjector::ChaosInjector(std::vector<ChaosEvent> events, PidOf pid_of, Clock::time_point start)
    : pid_of_(std::move(pid_of)), start_(start) {
  for (auto& e : events)
    due_.push_back({start + e.at, std::move(e), false, -1});
  std::stable_sort(due_.begin(), due_.end(),
                   [](const Due& a, const Due& b) { return a.at < b.at; });
}

ChaosInjector::~ChaosInjector() {
  resume_all();
}

void ChaosInjector::send(const Due& d) {
  const bool kill = d.event.action == ChaosEvent::Action::kill;
  const pid_t pid = d.resume ? d.pid : pid_of_(d.event.task);
  const char* what = d.resume ? "cont" : (kill ? "kill" : "stop");
  if (pid <= 0) what = "missed";
  const double at_s = std::chrono::duration<double>(Clock::now() - start_).count();
  if (pid > 0) ::kill(pid, d.resume ? SIGCONT : (kill ? SIGKILL : SIGSTOP));
  std::cerr << "troupe chaos: " << what << " " << d.event.task.to_string() << " (pid " << pid
            << ") at " << at_s << " s" << std::endl;
  const auto unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  log_.push_back({{"action", what},
                  {"task", d.event.task.to_string()},
                  {"pid", pid},
                  {"at_s", at_s},
                  {"unix_ms", unix_ms}});
  if (pid <= 0 || d.resume) return;
  ++injections_;
  if (!kill) {
    // The resume goes to the process that was stopped, even if the task is restarted.
    Due resume{Clock::now() + d.event.duration, d.event, true, pid};
    due_.insert(std::upper_bound(due_.begin(), due_.end(), resume,
                                 [](const Due& a, const Due& b) { return a.at < b.at; }),
                resume);
  }
}

int ChaosInjector::run_due() {
  int sent = 0;
  while (!due_.empty() && due_.front().at <= Clock::now()) {
    const Due d = due_.front();
    due_.erase(due_.begin());
    send(d);
    ++sent;
  }
  return sent;
}

std::optional<std::chrono::milliseconds> ChaosInjector::next_due() const {
  if (due_.empty()) return std::nullopt;
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(due_.front().at - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

bool ChaosInjector::run_until_done(std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (auto next = next_due()) {
    if (Clock::now() + *next > deadline) return false;
    // The events are at fixed times: waiting for the next one is the schedule itself.
    std::this_thread::sleep_for(*next);
    run_due();
  }
  return true;
}

void ChaosInjector::resume_all() {
  std::vector<Due> resumes;
  for (const auto& d : due_)
    if (d.resume) resumes.push_back(d);
  due_.erase(std::remove_if(due_.begin(), due_.end(), [](const Due& d) { return d.resume; }),
             due_.end());
  for (const auto& d : resumes)
    send(d);
}

core::Expected<std::vector<ListedTask>> read_task_listing(const std::string& run_dir) {
  const std::string path = run_dir + "/tasks.json";
  std::ifstream in(path);
  if (!in) return core::make_error(core::Errc::not_found, path + ": cannot open");
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return core::make_error(core::Errc::data_loss, path + ": not a JSON array");
  std::vector<ListedTask> tasks;
  for (const auto& t : j) {
    if (!t.is_object() || !t.contains("type") || !t.contains("index") || !t.contains("address") ||
        !t.contains("pid") || !t["type"].is_string() || !t["index"].is_number_integer() ||
        !t["address"].is_string() || !t["pid"].is_number_integer() ||
        t["index"].get<int64_t>() < 0 ||
        t["index"].get<int64_t>() > std::numeric_limits<int>::max())
      return core::make_error(core::Errc::data_loss,
                              path + ": a task without type, index, address or pid");
    tasks.push_back({{t["type"].get<std::string>(), t["index"].get<int>()},
                     t["address"].get<std::string>(),
                     t["pid"].get<pid_t>()});
  }
  return tasks;
}

core::Expected<std::map<std::string, pid_t>> read_task_pids(const std::string& run_dir) {
  auto tasks = read_task_listing(run_dir);
  if (!tasks) return tasks.error();
  std::map<std::string, pid_t> pids;
  for (const auto& t : *tasks)
    pids[t.id.to_string()] = t.pid;
  return pids;
}

}  // namespace troupe::tools
