#pragma once

// Troupe's errors as Python sees them: a core::Error thrown as TroupeError and raised as
// the troupe.errors class of its code (InvalidArgumentError, UnavailableError, ...), named
// as TensorFlow names its own, with Troupe's message.

#include <stdexcept>
#include <string>

#include "core/expected.hpp"

namespace troupe::python {

class TroupeError : public std::runtime_error {
 public:
  explicit TroupeError(const core::Error& e) : std::runtime_error(e.message), code_(e.code) {}
  TroupeError(core::Errc code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  core::Errc code() const { return code_; }

 private:
  core::Errc code_;
};

/// Throws a status's error.
inline void check(const core::Status& st) {
  if (!st) throw TroupeError(st.error());
}

/// An expected's value, or its error thrown.
template <class T>
T take(core::Expected<T> e) {
  if (!e) throw TroupeError(e.error());
  return std::move(*e);
}

[[noreturn]] inline void invalid(const std::string& message) {
  throw TroupeError(core::Errc::invalid_argument, message);
}

}  // namespace troupe::python
