#include "core/expected.hpp"

namespace troupe::core {

const char* errc_name(Errc code) {
  switch (code) {
    case Errc::invalid_argument:
      return "invalid_argument";
    case Errc::not_found:
      return "not_found";
    case Errc::io_error:
      return "io_error";
    case Errc::data_loss:
      return "data_loss";
    case Errc::out_of_range:
      return "out_of_range";
    case Errc::unavailable:
      return "unavailable";
    case Errc::cancelled:
      return "cancelled";
    case Errc::internal:
      return "internal";
    case Errc::permission_denied:
      return "permission_denied";
  }
  return "unknown";
}

}  // namespace troupe::core
