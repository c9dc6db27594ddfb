// Keras's IntegerLookup in "int" mode: int64 ids to vocabulary indices on the host
// (core/layers/index_lookup.hpp says how indices are assigned).

#include <cerrno>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/layers/index_lookup.hpp"
#include "core/layers/string_hash.hpp"

namespace troupe::core::layers {

namespace {

// A token of an integer vocabulary (its config's ints are written in decimal, a file's
// lines as they are) in the one decimal form lookups compare.
Expected<std::string> canonical(LayerConfig& c, const std::string& key, const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE)
    return c.error(key, "holds '" + s + "', which is not a 64-bit integer");
  return decimal(static_cast<int64_t>(v));
}

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_integer_lookup(LayerConfig& c) {
  IndexLookupOptions o;
  o.integer = true;
  if (auto st = read_index_lookup(c, o); !st) return st.error();
  if (o.salt && o.floormod)
    return c.error("salt", "is used only with oov_method \"farmhash\" (as Keras requires)");
  const auto& mask = c.raw("mask_token");
  if (mask.is_number_integer())
    o.mask_token = decimal(mask.get<int64_t>());
  else if (!mask.is_null())
    return c.error("mask_token", "must be null or an integer");
  auto oov = c.integer("oov_token", -1);
  if (!oov) return oov.error();
  o.oov_token = decimal(*oov);
  if (auto st = c.allow("vocabulary_dtype", {"int64"}); !st) return st.error();
  auto vocabulary = c.vocabulary("vocabulary");
  if (!vocabulary) return vocabulary.error();
  for (auto& token : *vocabulary) {
    auto t = canonical(c, "vocabulary", token);
    if (!t) return t.error();
    token = std::move(*t);
  }
  o.vocabulary = std::move(*vocabulary);
  return make_index_lookup("IntegerLookup", c.name(), std::move(o));
}

}  // namespace troupe::core::layers
