#pragma once

// msgpack encoding of closure arguments and results.

#include <string>
#include <tuple>
#include <vector>

#include <msgpack.hpp>

#include "core/expected.hpp"

namespace troupe {

/// Encodes values as one msgpack array.
template <class... Ts>
std::vector<char> encode_args(const Ts&... xs) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, std::make_tuple(xs...));
  return {buf.data(), buf.data() + buf.size()};
}

template <class T>
std::vector<char> encode_value(const T& x) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, x);
  return {buf.data(), buf.data() + buf.size()};
}

/// Decodes bytes written by encode_value / encode_args; malformed bytes, or sizes past
/// what the bytes can hold, are an invalid_argument error (never an exception across an
/// actor boundary, never an allocation a header merely announced).
template <class T>
core::Expected<T> decode(const std::vector<char>& bytes) {
  try {
    // No container can hold more elements than there are bytes left: without this bound
    // msgpack-c allocates what a 5-byte array header announces (tests/fuzz found 64 GB).
    const size_t n = bytes.size();
    const msgpack::unpack_limit limit(n, n, n, n, n, /*depth=*/64);
    auto handle = msgpack::unpack(bytes.data(), n, nullptr, nullptr, limit);
    return handle.get().as<T>();
  } catch (const std::exception& e) {
    return core::make_error(core::Errc::invalid_argument,
                            std::string("cannot decode closure bytes: ") + e.what());
  }
}

}  // namespace troupe
