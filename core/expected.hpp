#pragma once

#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "core/assert.hpp"

namespace troupe::core {

/// Error codes of recoverable errors. `net/` registers the same enum with CAF so that
/// errors cross actor boundaries as values.
enum class Errc : int {
  invalid_argument = 1,  // the caller passed something that can never work
  not_found,             // a file, name or key that does not exist
  io_error,              // the OS refused a read, write, rename or sync
  data_loss,             // a file is truncated or corrupt (bad magic, CRC mismatch)
  out_of_range,          // an index or size outside what the input allows
  unavailable,           // a peer or resource is (perhaps temporarily) gone
  cancelled,             // work withdrawn before it finished
  internal,              // a bug surfaced as a value rather than an abort
  permission_denied,     // a peer that is not a member of the job (no proof of its secret)
};

const char* errc_name(Errc code);

/// A recoverable error: a code and a message that names the input at fault.
struct Error {
  Errc code = Errc::internal;
  std::string message;

  std::string to_string() const { return std::string(errc_name(code)) + ": " + message; }
};

/// Thrown by `Expected::value()` on an error (and `error()` on a value): misuse in user
/// code must not abort a serving process. A worker turns it into the step's error reply,
/// with the error's own code.
class BadExpectedAccess : public std::exception {
 public:
  explicit BadExpectedAccess(Error error)
      : error_(std::move(error)), what_("value() of an error: " + error_.to_string()) {}
  const Error& error() const noexcept { return error_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  Error error_;
  std::string what_;
};

/// Either a value or an Error. `value()` on an error throws BadExpectedAccess holding it.
template <class T>
class Expected {
 public:
  using value_type = T;

  Expected(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Expected(Error error) : v_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }

  T& value() & {
    check();
    return std::get<T>(v_);
  }
  T&& value() && {
    check();
    return std::get<T>(std::move(v_));
  }
  const T& value() const& {
    check();
    return std::get<T>(v_);
  }
  const Error& error() const {
    if (ok())
      throw BadExpectedAccess(Error{Errc::internal, "error() of an Expected that holds a value"});
    return std::get<Error>(v_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void check() const {
    if (!ok()) throw BadExpectedAccess(std::get<Error>(v_));
  }

  std::variant<T, Error> v_;
};

/// Success or an Error, for operations without a result.
class Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}  // NOLINT: implicit by design
  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    if (!error_) throw BadExpectedAccess(Error{Errc::internal, "error() of an ok Status"});
    return *error_;
  }

 private:
  std::optional<Error> error_;
};

inline Error make_error(Errc code, std::string message) {
  return Error{code, std::move(message)};
}

}  // namespace troupe::core
