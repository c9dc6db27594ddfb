#pragma once

// Reads the scalars of TensorBoard event files back (tests only): a small protocol-buffer
// reader for Event{step = 2, summary = 5 {value = 1 {tag = 1, simple_value = 2}}}.

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/summary/event_writer.hpp"

namespace troupe::test {

struct Scalar {
  std::string tag;
  int64_t step = 0;
  float value = 0.0f;
};

namespace detail {

inline uint64_t varint(const std::string& b, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0; i < b.size(); shift += 7) {
    const auto c = static_cast<uint8_t>(b[i++]);
    v |= uint64_t{c & 0x7fu} << shift;
    if ((c & 0x80) == 0) break;
  }
  return v;
}

// Calls f(field, wire_type, bytes-or-empty, varint-or-fixed) for each field of a message.
template <class F>
void fields(const std::string& b, F f) {
  size_t i = 0;
  while (i < b.size()) {
    const uint64_t key = varint(b, i);
    const auto field = static_cast<uint32_t>(key >> 3);
    const auto type = static_cast<uint32_t>(key & 7);
    if (type == 0) {
      f(field, type, std::string(), varint(b, i));
    } else if (type == 1 || type == 5) {
      const size_t n = type == 1 ? 8 : 4;
      uint64_t v = 0;
      std::memcpy(&v, b.data() + i, n);
      i += n;
      f(field, type, std::string(), v);
    } else if (type == 2) {
      const auto n = static_cast<size_t>(varint(b, i));
      f(field, type, b.substr(i, n), 0);
      i += n;
    } else {
      return;
    }
  }
}

}  // namespace detail

/// Every scalar in the event files of `dir` (files in name order, records in order).
inline std::vector<Scalar> read_scalars(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<Scalar> out;
  for (const auto& f : files) {
    auto records = core::read_records(f);
    if (!records) continue;
    for (const auto& r : *records) {
      int64_t step = 0;
      std::vector<Scalar> here;
      detail::fields(r, [&](uint32_t field, uint32_t, const std::string& bytes, uint64_t v) {
        if (field == 2) step = static_cast<int64_t>(v);
        if (field != 5) return;
        detail::fields(bytes, [&](uint32_t f2, uint32_t, const std::string& value, uint64_t) {
          if (f2 != 1) return;
          Scalar s;
          detail::fields(value, [&](uint32_t f3, uint32_t, const std::string& tag, uint64_t x) {
            if (f3 == 1) s.tag = tag;
            if (f3 == 2) {
              const auto u = static_cast<uint32_t>(x);
              std::memcpy(&s.value, &u, 4);
            }
          });
          here.push_back(s);
        });
      });
      for (auto& s : here) {
        s.step = step;
        out.push_back(s);
      }
    }
  }
  return out;
}

}  // namespace troupe::test
