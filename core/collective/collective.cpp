#include "core/collective/collective.hpp"

#include <algorithm>
#include <cctype>

namespace troupe::collective {

using core::Errc;
using core::make_error;

const char* to_string(Communication c) {
  switch (c) {
    case Communication::automatic:
      return "auto";
    case Communication::ring:
      return "ring";
    case Communication::nccl:
      return "nccl";
  }
  return "?";
}

core::Expected<Communication> parse_communication(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (t == "auto") return Communication::automatic;
  if (t == "ring") return Communication::ring;
  if (t == "nccl") return Communication::nccl;
  return make_error(Errc::invalid_argument,
                    "communication '" + text + "': expected auto, ring or nccl");
}

Group::Group(int rank, int size, Communication hint,
             std::vector<std::unique_ptr<Implementation>> implementations)
    : rank_(rank), size_(size), hint_(hint), impls_(std::move(implementations)) {}

core::Expected<Implementation*> Group::choose(const AllReduceOptions& options) const {
  std::string tried;
  for (const auto& impl : impls_) {
    if (hint_ != Communication::automatic && impl->kind() != hint_) continue;
    if (impl->enabled(options)) return impl.get();
    tried += std::string(tried.empty() ? "" : ", ") + impl->name() + " is not enabled for them";
  }
  return make_error(Errc::unavailable,
                    std::string("all-reduce '") + options.tag + "': no implementation for " +
                        (options.memory == Memory::device ? "device" : "host") +
                        " buffers with communication=" + to_string(hint_) + " (" +
                        (tried.empty() ? std::string("none of that kind is built") : tried) + ")");
}

core::Status all_reduce(Group& group, const AllReduceOptions& options) {
  auto impl = group.choose(options);
  if (!impl) return impl.error();
  return (*impl)->all_reduce(options);
}

Memory memory_of(const std::vector<Buffer>& buffers) {
  for (const auto& b : buffers)
    if (!b.device.is_cpu()) return Memory::device;
  return Memory::host;
}

}  // namespace troupe::collective
