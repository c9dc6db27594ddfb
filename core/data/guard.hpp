#pragma once

#include <exception>
#include <string>

#include "core/expected.hpp"

namespace troupe::core {

/// Runs user data code (a dataset function, an iterator's next()) and turns what it throws
/// into an error naming `what`: value() of an error (BadExpectedAccess) keeps that error's
/// code and message (a file's name and offset), anything else is `internal`.
template <class F>
Status guard_user_data(const std::string& what, F&& fn) {
  try {
    fn();
    return {};
  } catch (const BadExpectedAccess& e) {
    return make_error(e.error().code, what + ": " + e.error().message);
  } catch (const std::exception& e) {
    return make_error(Errc::internal, what + " threw: " + e.what());
  } catch (...) {
    return make_error(Errc::internal, what + " threw a non-exception");
  }
}

}  // namespace troupe::core
