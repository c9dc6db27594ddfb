#include "net/wire.hpp"

#include "core/partitioner.hpp"

namespace troupe::net {

WireTensor WireTensor::from(core::ConstTensorView v) {
  WireTensor t;
  t.dims = v.shape().to_vector();
  t.data.assign(v.data(), v.data() + v.size());
  return t;
}

bool WireTensor::consistent() const {
  if (dims.size() > static_cast<size_t>(core::Shape::max_rank)) return false;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > static_cast<int64_t>(data.size()) / d + 1)) return false;
    n *= d;
  }
  return n == static_cast<int64_t>(data.size());
}

core::ConstTensorView WireTensor::view() const {
  TROUPE_ASSERT(consistent(), "view() of an inconsistent WireTensor");
  return {data.data(), core::Shape(dims)};
}

core::Expected<core::Tensor> concat_shards(const std::vector<WireTensor>& shards) {
  if (shards.empty()) return core::make_error(core::Errc::internal, "no shards to concatenate");
  std::vector<core::ConstTensorView> views;
  for (const auto& t : shards) {
    if (!t.consistent())
      return core::make_error(core::Errc::data_loss, "inconsistent tensor from a PS");
    views.push_back(t.view());
  }
  return core::concat_rows(views);
}

caf::error to_caf(const core::Error& e) {
  return caf::error(static_cast<uint8_t>(e.code), error_category, caf::make_message(e.message));
}

core::Error from_caf(const caf::error& e) {
  std::string context;
  if (!e.context().empty() && e.context().match_elements<std::string>())
    context = e.context().get_as<std::string>(0);
  if (e.category() == error_category)
    return core::Error{static_cast<core::Errc>(e.code()), context};
  const std::string what = caf::to_string(e);
  if (e.category() == caf::atom("system")) {
    switch (static_cast<caf::sec>(e.code())) {
      case caf::sec::request_timeout:
      case caf::sec::request_receiver_down:
      case caf::sec::remote_linking_failed:
      case caf::sec::cannot_connect_to_node:
      case caf::sec::no_actor_published_at_port:
        return core::Error{core::Errc::unavailable, what};
      default:
        break;
    }
  }
  return core::Error{core::Errc::internal, what};
}

}  // namespace troupe::net
