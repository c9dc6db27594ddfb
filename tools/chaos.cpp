#include "tools/chaos.hpp"

#include <charconv>

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

}  // namespace troupe::tools
