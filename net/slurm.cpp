#include "net/slurm.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace troupe::net {

using core::Errc;
using core::make_error;

namespace {

core::Error slurm_error(const std::string& what) {
  return make_error(Errc::invalid_argument, "Slurm: " + what);
}

Expected<int> to_int(std::string_view text, const std::string& what) {
  int v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty())
    return slurm_error(what + " '" + std::string(text) + "' is not an integer");
  return v;
}

// Splits on commas outside brackets: "n[1-2,5],m" -> "n[1-2,5]", "m".
std::vector<std::string_view> split_top(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || (s[i] == ',' && depth == 0)) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    } else if (s[i] == '[') {
      ++depth;
    } else if (s[i] == ']') {
      --depth;
    }
  }
  return parts;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

Expected<std::vector<std::string>> expand_hostlist(std::string_view hostlist) {
  constexpr size_t max_hosts = 1 << 16;
  std::vector<std::string> hosts;
  const std::string quoted = "hostlist '" + std::string(hostlist) + "'";
  if (hostlist.empty()) return slurm_error("empty " + quoted);
  for (std::string_view part : split_top(hostlist)) {
    const size_t open = part.find('[');
    if (open == std::string_view::npos) {
      if (part.empty() || part.find(']') != std::string_view::npos)
        return slurm_error(quoted + ": bad part '" + std::string(part) + "'");
      hosts.emplace_back(part);
      continue;
    }
    if (part.back() != ']' || part.find('[', open + 1) != std::string_view::npos)
      return slurm_error(quoted + ": bad part '" + std::string(part) + "'");
    const std::string prefix(part.substr(0, open));
    const std::string_view ranges = part.substr(open + 1, part.size() - open - 2);
    size_t start = 0;
    while (start <= ranges.size()) {
      const size_t comma = std::min(ranges.find(',', start), ranges.size());
      const std::string_view range = ranges.substr(start, comma - start);
      const size_t dash = range.find('-');
      const std::string_view lo_text = range.substr(0, dash);
      const std::string_view hi_text =
          dash == std::string_view::npos ? lo_text : range.substr(dash + 1);
      auto lo = to_int(lo_text, quoted + ": range start");
      if (!lo) return lo.error();
      auto hi = to_int(hi_text, quoted + ": range end");
      if (!hi) return hi.error();
      if (*lo < 0 || *hi < *lo)
        return slurm_error(quoted + ": bad range '" + std::string(range) + "'");
      if (hosts.size() + static_cast<size_t>(*hi - *lo + 1) > max_hosts)
        return slurm_error(quoted + ": more than 65536 hosts");
      for (int i = *lo; i <= *hi; ++i) {
        std::string digits = std::to_string(i);
        if (digits.size() < lo_text.size())  // zero padding: "07-10" -> 07 08 09 10
          digits.insert(0, lo_text.size() - digits.size(), '0');
        hosts.push_back(prefix + digits);
      }
      start = comma + 1;
    }
  }
  return hosts;
}

Expected<std::vector<int>> expand_tasks_per_node(std::string_view tasks_per_node) {
  std::vector<int> out;
  const std::string quoted = "tasks per node '" + std::string(tasks_per_node) + "'";
  if (tasks_per_node.empty()) return slurm_error("empty " + quoted);
  for (std::string_view part : split_top(tasks_per_node)) {
    int repeat = 1;
    std::string_view count = part;
    if (const size_t paren = part.find("(x"); paren != std::string_view::npos) {
      if (part.back() != ')') return slurm_error(quoted + ": bad part '" + std::string(part) + "'");
      auto r = to_int(part.substr(paren + 2, part.size() - paren - 3), quoted + ": repeat");
      if (!r) return r.error();
      repeat = *r;
      count = part.substr(0, paren);
    }
    auto n = to_int(count, quoted + ": count");
    if (!n) return n.error();
    if (*n < 0 || repeat < 1 || out.size() + static_cast<size_t>(repeat) > (1u << 16))
      return slurm_error(quoted + ": bad part '" + std::string(part) + "'");
    out.insert(out.end(), static_cast<size_t>(repeat), *n);
  }
  return out;
}

std::map<std::string, int> default_ps_jobs(int n) {
  const int ps = std::max(1, (n - 1) / 2);
  return {{"chief", 1}, {"ps", ps}, {"worker", std::max(0, n - 1 - ps)}};
}

Expected<SlurmClusterResolver> SlurmClusterResolver::make(int rank, const std::string& nodelist,
                                                          const std::string& tasks_per_node,
                                                          const std::map<std::string, int>& jobs,
                                                          int port_base) {
  auto hosts = expand_hostlist(nodelist);
  if (!hosts) return hosts.error();
  auto counts = expand_tasks_per_node(tasks_per_node);
  if (!counts) return counts.error();
  if (counts->size() != hosts->size())
    return slurm_error("the step has " + std::to_string(hosts->size()) + " nodes ('" + nodelist +
                       "') but tasks per node for " + std::to_string(counts->size()) + " ('" +
                       tasks_per_node + "')");
  // Nodes sorted by name, each node's tasks on consecutive ports.
  std::map<std::string, int> per_node;
  for (size_t i = 0; i < hosts->size(); ++i)
    per_node[(*hosts)[i]] += (*counts)[i];
  std::vector<std::string> addresses;
  for (const auto& [host, n] : per_node)
    for (int i = 0; i < n; ++i) {
      if (port_base < 1 || port_base + i > 65535)
        return slurm_error("port base " + std::to_string(port_base) + " leaves no port for task " +
                           std::to_string(i) + " of node " + host);
      addresses.push_back(host + ":" + std::to_string(port_base + i));
    }
  int wanted = 0;
  for (const auto& [job, n] : jobs) {
    if (n < 0) return slurm_error("job '" + job + "' has " + std::to_string(n) + " tasks");
    wanted += n;
  }
  if (wanted != static_cast<int>(addresses.size()))
    return slurm_error("the jobs ask for " + std::to_string(wanted) + " tasks but the step has " +
                       std::to_string(addresses.size()));
  if (rank < 0 || rank >= wanted)
    return slurm_error("rank " + std::to_string(rank) + " out of range: the step has " +
                       std::to_string(wanted) + " tasks");
  // Jobs in name order (std::map) take consecutive ranks.
  SlurmClusterResolver r;
  std::map<std::string, std::vector<std::string>> cluster;
  int offset = 0;
  for (const auto& [job, n] : jobs) {
    if (n == 0) continue;
    cluster[job].assign(addresses.begin() + offset, addresses.begin() + offset + n);
    if (rank >= offset && rank < offset + n) r.task_ = {job, rank - offset};
    offset += n;
  }
  r.spec_ = ClusterSpec(std::move(cluster));
  if (auto st = r.spec_.validate(); !st) return slurm_error(st.error().message);
  return r;
}

Expected<SlurmClusterResolver> SlurmClusterResolver::from_env(
    std::map<std::string, int> (*default_jobs)(int)) {
  auto need = [](const char* name) -> Expected<std::string> {
    if (const char* v = env(name)) return std::string(v);
    return slurm_error(std::string(name) + " is not set (not inside a Slurm job step?)");
  };
  auto procid = need("SLURM_PROCID");
  if (!procid) return procid.error();
  auto rank = to_int(*procid, "SLURM_PROCID");
  if (!rank) return rank.error();
  auto nodelist = need("SLURM_STEP_NODELIST");
  if (!nodelist) return nodelist.error();
  auto per_node = need("SLURM_STEP_TASKS_PER_NODE");
  if (!per_node) return per_node.error();
  const char* ntasks_text = env("SLURM_STEP_NUM_TASKS");
  if (ntasks_text == nullptr) ntasks_text = env("SLURM_NTASKS");
  if (ntasks_text == nullptr)
    return slurm_error("neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set");
  auto ntasks = to_int(ntasks_text, "SLURM_STEP_NUM_TASKS");
  if (!ntasks) return ntasks.error();

  std::map<std::string, int> jobs;
  if (const char* text = env(slurm_jobs_env)) {
    const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.empty())
      return slurm_error(std::string(slurm_jobs_env) +
                         " must be a JSON object of job sizes, got '" + text + "'");
    for (const auto& [job, n] : j.items()) {
      if (!n.is_number_integer())
        return slurm_error(std::string(slurm_jobs_env) + ": job '" + job + "' needs an integer");
      jobs[job] = n.get<int>();
    }
  } else if (default_jobs != nullptr) {
    jobs = default_jobs(*ntasks);
  } else {
    jobs = {{"worker", *ntasks}};
  }
  int port_base = 8888;
  if (const char* text = env(slurm_port_base_env)) {
    auto p = to_int(text, slurm_port_base_env);
    if (!p) return p.error();
    port_base = *p;
  }
  return make(*rank, *nodelist, *per_node, jobs, port_base);
}

}  // namespace troupe::net
