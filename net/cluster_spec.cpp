#include "net/cluster_spec.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "core/json_text.hpp"
#include "core/utf8.hpp"
#include "net/slurm.hpp"
#include "net/socket.hpp"

namespace troupe::net {

using core::Errc;
using core::make_error;

namespace {

const std::set<std::string> known_jobs{"chief", "worker", "ps", "evaluator"};

core::Error tf_config_error(const std::string& what) {
  return make_error(Errc::invalid_argument, "TF_CONFIG: " + what);
}

// A host as TF_CONFIG may name it: an IPv6 address (bracketed in the address), an IPv4
// address, a DNS name (letters, digits, '-' and '_' in dot-separated labels of at most 63),
// or "*". Anything else -- "256.1.1.1", a stray newline or space -- is refused here rather
// than resolved to nothing and listened for on every interface.
core::Status check_host(const std::string& host, bool bracketed) {
  auto bad = [&](const std::string& why) {
    std::string shown;
    for (unsigned char c : host)
      if (c < 0x20 || c == 0x7f) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\x%02x", c);
        shown += esc;
      } else {
        shown.push_back(static_cast<char>(c));
      }
    return make_error(Errc::invalid_argument, "host '" + shown + "' " + why);
  };
  if (host.empty()) return bad("is empty");
  if (bracketed) {
    in6_addr a6{};
    if (::inet_pton(AF_INET6, host.c_str(), &a6) != 1) return bad("is not an IPv6 address");
    return {};
  }
  if (host == "*") return {};
  if (host.size() > 253) return bad("is longer than a DNS name may be (253)");
  bool numeric = true;
  size_t label = 0;
  for (size_t i = 0; i <= host.size(); ++i) {
    if (i == host.size() || host[i] == '.') {
      if (label == 0 && !(i == host.size() && i > 0)) return bad("has an empty label");
      if (label > 63) return bad("has a label longer than 63 characters");
      label = 0;
      continue;
    }
    const char c = host[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      return bad("holds a character no host name may");
    if (!std::isdigit(static_cast<unsigned char>(c))) numeric = false;
    ++label;
  }
  in_addr a4{};
  if (numeric && ::inet_pton(AF_INET, host.c_str(), &a4) != 1)
    return bad("is not an IPv4 address (four numbers of 0..255)");
  return {};
}

// The addresses a host names, in one spelling each, for telling two tasks apart: numeric
// addresses normalized ("[0::1]" is "::1"), "localhost" both loopback addresses, any other
// name itself in lower case (names are not looked up here: under Kubernetes or Slurm they
// may resolve only once every task is up).
std::vector<std::string> spellings(const std::string& host) {
  std::string lower;
  for (char c : host)
    lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (lower == "localhost" || lower == "localhost.") return {"127.0.0.1", "::1"};
  char text[INET6_ADDRSTRLEN] = {};
  in_addr a4{};
  in6_addr a6{};
  if (::inet_pton(AF_INET, lower.c_str(), &a4) == 1 &&
      ::inet_ntop(AF_INET, &a4, text, sizeof text) != nullptr)
    return {text};
  if (::inet_pton(AF_INET6, lower.c_str(), &a6) == 1 &&
      ::inet_ntop(AF_INET6, &a6, text, sizeof text) != nullptr)
    return {text};
  return {lower};
}

}  // namespace

Expected<HostPort> parse_host_port(const std::string& address) {
  HostPort hp;
  std::string port_text;
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':')
      return make_error(Errc::invalid_argument, "address '" + address + "' is not [host]:port");
    hp.host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0 || address.find(':') != colon)
      return make_error(Errc::invalid_argument, "address '" + address + "' is not host:port");
    hp.host = address.substr(0, colon);
    port_text = address.substr(colon + 1);
  }
  if (auto st = check_host(hp.host, address.front() == '['); !st)
    return make_error(Errc::invalid_argument, "address '" + address + "': " + st.error().message);
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || p != port_text.data() + port_text.size() || port == 0 || port > 65535)
    return make_error(Errc::invalid_argument,
                      "address '" + address + "' has no valid port (1..65535)");
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

ClusterSpec::ClusterSpec(std::map<std::string, std::vector<std::string>> jobs)
    : jobs_(std::move(jobs)) {}

core::Status ClusterSpec::validate() const {
  std::map<std::string, std::pair<std::string, std::string>> seen;  // -> (as given, task)
  for (const auto& [job, addresses] : jobs_) {
    if (known_jobs.count(job) == 0)
      return make_error(Errc::invalid_argument,
                        "unknown job '" + job + "' (known: chief, worker, ps, evaluator)");
    if (job == "chief" && addresses.size() > 1)
      return make_error(
          Errc::invalid_argument,
          "job 'chief' has " + std::to_string(addresses.size()) + " tasks; there can be only one");
    for (size_t i = 0; i < addresses.size(); ++i) {
      const std::string task = job + ":" + std::to_string(i);
      auto hp = parse_host_port(addresses[i]);
      if (!hp) return make_error(Errc::invalid_argument, task + ": " + hp.error().message);
      // Compared as the addresses they name: "localhost:P" and "127.0.0.1:P" are one port,
      // and two tasks given it would answer for each other.
      for (const auto& host : spellings(hp->host)) {
        auto [it, fresh] =
            seen.emplace(host_port_text(host, hp->port), std::make_pair(addresses[i], task));
        if (!fresh)
          return make_error(Errc::invalid_argument, it->second.second + " ('" + it->second.first +
                                                        "') and " + task + " ('" + addresses[i] +
                                                        "') are the same address");
      }
    }
  }
  return {};
}

int local_rank(const ClusterSpec& spec, const TaskId& task) {
  if (task.type != "chief" && task.type != "worker") return -1;
  auto host_of = [&](const TaskId& t) -> std::string {
    auto hp = parse_host_port(spec.address(t));
    if (!hp) return spec.address(t);
    if (hp->host == "localhost" || hp->host == "::1" || hp->host.rfind("127.", 0) == 0)
      return "loopback";
    return hp->host;
  };
  const std::string mine = host_of(task);
  int rank = 0;
  for (const char* job : {"chief", "worker"})
    for (int i = 0; i < spec.num_tasks(job); ++i) {
      const TaskId t{job, i};
      if (t == task) return rank;
      if (host_of(t) == mine) ++rank;
    }
  return -1;
}

int ClusterSpec::num_tasks(const std::string& job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : static_cast<int>(it->second.size());
}

const std::string& ClusterSpec::address(const TaskId& task) const {
  auto it = jobs_.find(task.type);
  TROUPE_ASSERT(
      it != jobs_.end() && task.index >= 0 && task.index < static_cast<int>(it->second.size()),
      "address() of a task that is not in the cluster");
  return it->second[static_cast<size_t>(task.index)];
}

std::vector<TaskId> ClusterSpec::tasks() const {
  std::vector<TaskId> out;
  for (const auto& [job, addresses] : jobs_)
    for (size_t i = 0; i < addresses.size(); ++i)
      out.push_back({job, static_cast<int>(i)});
  return out;
}

Expected<TFConfigClusterResolver> TFConfigClusterResolver::from_env(
    std::map<std::string, int> (*slurm_jobs)(int)) {
  const char* text = std::getenv("TF_CONFIG");
  if (text != nullptr && *text != '\0') return parse(text);
  const char* procid = std::getenv("SLURM_PROCID");
  if (procid == nullptr || *procid == '\0')
    return make_error(Errc::invalid_argument, "TF_CONFIG is not set (nor is SLURM_PROCID)");
  auto slurm = SlurmClusterResolver::from_env(slurm_jobs);
  if (!slurm) return slurm.error();
  const std::string rendered = render(slurm->cluster_spec(), slurm->task());
  ::setenv("TF_CONFIG", rendered.c_str(), 1);  // what the rest of the process reads
  return parse(rendered);
}

Expected<TFConfigClusterResolver> TFConfigClusterResolver::parse(const std::string& tf_config) {
  using nlohmann::json;
  if (auto bad = core::first_invalid_utf8(tf_config)) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(tf_config[*bad]));
    return tf_config_error("not valid UTF-8 (byte " + std::string(byte) + " at offset " +
                           std::to_string(*bad) + ")");
  }
  try {
    return parse_json(tf_config);
  } catch (const json::exception& e) {
    // Whatever the checks below missed is still an error naming TF_CONFIG, never an abort.
    return tf_config_error(std::string("not valid JSON (") + e.what() + ")");
  }
}

Expected<TFConfigClusterResolver> TFConfigClusterResolver::parse_json(
    const std::string& tf_config) {
  using nlohmann::json;
  const json j = json::parse(tf_config);
  if (!j.is_object()) return tf_config_error("must be a JSON object, got " + core::json_text(j));
  if (!j.contains("cluster")) return tf_config_error("no \"cluster\"");
  const json& cluster = j["cluster"];
  if (!cluster.is_object() || cluster.empty())
    return tf_config_error("\"cluster\" must be a non-empty object of job lists, got " +
                           core::json_text(cluster));

  std::map<std::string, std::vector<std::string>> jobs;
  for (const auto& [job, list] : cluster.items()) {
    if (!list.is_array())
      return tf_config_error("job '" + job + "' must be a list of addresses, got " +
                             core::json_text(list));
    std::vector<std::string> addresses;
    for (const auto& a : list) {
      if (!a.is_string())
        return tf_config_error("job '" + job + "' has a non-string address " + core::json_text(a));
      addresses.push_back(a.get<std::string>());
    }
    jobs[job] = std::move(addresses);
  }
  TFConfigClusterResolver r;
  r.spec_ = ClusterSpec(std::move(jobs));
  if (auto st = r.spec_.validate(); !st) return tf_config_error(st.error().message);

  if (!j.contains("task")) return tf_config_error("no \"task\"");
  const json& task = j["task"];
  if (!task.is_object() || !task.contains("type") || !task["type"].is_string())
    return tf_config_error("\"task\" must be {\"type\": string, \"index\": int}, got " +
                           core::json_text(task));
  r.task_.type = task["type"].get<std::string>();
  const json index = task.value("index", json(0));
  if (!index.is_number_integer())
    return tf_config_error("task index must be an integer, got " + core::json_text(index));
  const auto idx = index.get<int64_t>();
  if (!r.spec_.has_job(r.task_.type))
    return tf_config_error("task type '" + r.task_.type + "' is not a job of the cluster");
  if (idx < 0 || idx >= r.spec_.num_tasks(r.task_.type))
    return tf_config_error("task index " + std::to_string(idx) + " out of range: job '" +
                           r.task_.type + "' has " +
                           std::to_string(r.spec_.num_tasks(r.task_.type)) + " tasks");
  r.task_.index = static_cast<int>(idx);
  const json rpc = j.value("rpc_layer", json("caf"));
  if (!rpc.is_string())
    return tf_config_error("\"rpc_layer\" must be a string, got " + core::json_text(rpc));
  r.rpc_layer_ = rpc.get<std::string>();
  return r;
}

std::string TFConfigClusterResolver::render(const ClusterSpec& spec, const TaskId& task) {
  nlohmann::json cluster = nlohmann::json::object();
  for (const auto& [job, addresses] : spec.jobs())
    cluster[job] = addresses;
  return core::json_text(nlohmann::json{{"cluster", cluster},
                                        {"task", {{"type", task.type}, {"index", task.index}}},
                                        {"rpc_layer", "caf"}});
}

}  // namespace troupe::net
