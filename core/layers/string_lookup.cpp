// Keras's StringLookup in "int" mode: strings to vocabulary indices on the host
// (core/layers/index_lookup.hpp says how indices are assigned).

#include <nlohmann/json.hpp>

#include "core/layers/index_lookup.hpp"

namespace troupe::core::layers {

Expected<std::unique_ptr<graph::Operation>> make_string_lookup(LayerConfig& c) {
  IndexLookupOptions o;
  if (auto st = read_index_lookup(c, o); !st) return st.error();
  const auto& mask = c.raw("mask_token");
  if (mask.is_string())
    o.mask_token = mask.get<std::string>();
  else if (!mask.is_null())
    return c.error("mask_token", "must be null or a string");
  auto oov = c.string("oov_token", "[UNK]");
  if (!oov) return oov.error();
  o.oov_token = *oov;
  // Tokens are compared as the bytes the data holds, which utf-8 leaves as they are.
  if (auto st = c.allow("encoding", {"utf-8"}); !st) return st.error();
  if (auto st = c.allow("vocabulary_dtype", {"string"}); !st) return st.error();
  auto vocabulary = c.vocabulary("vocabulary");
  if (!vocabulary) return vocabulary.error();
  o.vocabulary = std::move(*vocabulary);
  return make_index_lookup("StringLookup", c.name(), std::move(o));
}

}  // namespace troupe::core::layers
