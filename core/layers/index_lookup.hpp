#pragma once

// What StringLookup and IntegerLookup share (Keras's IndexLookup, output_mode "int", not
// inverted): a vocabulary of tokens mapped to indices, computed on the host when a batch is
// fed. With a mask token, index 0 is the mask; then come the num_oov_indices indices of
// out-of-vocabulary tokens; then the vocabulary in its order. Several OOV indices are
// chosen by the token's hash (strings; integers with oov_method "farmhash": their decimal
// text), FarmHash's Fingerprint64 or, with a salt, SipHash (core/layers/string_hash.hpp),
// or for integers by floor modulo. With no OOV index, a token outside the vocabulary is an
// error naming it, as Keras's assertion is.
//
//   IndexLookupOptions o;
//   o.vocabulary = {"a", "b"};        // "a" -> 1, "b" -> 2, anything else -> 0
//   auto layer = make_index_lookup("StringLookup", "lookup", std::move(o));

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

struct IndexLookupOptions {
  bool integer = false;  // IntegerLookup: int64 tokens (written here in decimal)
  int64_t num_oov_indices = 1;
  std::optional<std::string> mask_token;
  std::string oov_token;
  /// Integers' OOV index by floor modulo ("floormod") rather than by hash ("farmhash");
  /// strings are always hashed.
  bool floormod = true;
  std::optional<std::array<uint64_t, 2>> salt;
  std::optional<int64_t> max_tokens;
  /// Keras's vocabulary_size when the config has one: checked against the vocabulary's.
  std::optional<int64_t> vocabulary_size;
  /// The tokens, optionally preceded by the special tokens in Keras's order (the mask
  /// token, then oov_token once per OOV index), as an asset file holds them.
  std::vector<std::string> vocabulary;
};

/// The lookup layer of class `class_name` ("StringLookup", "IntegerLookup"); errors (an
/// empty or repeated vocabulary, the mask token inside it, more tokens than max_tokens)
/// name the layer and the argument at fault.
Expected<std::unique_ptr<graph::Operation>> make_index_lookup(const std::string& class_name,
                                                              const std::string& name,
                                                              IndexLookupOptions options);

/// Reads the arguments StringLookup and IntegerLookup share (all but the tokens' types):
/// num_oov_indices, oov_method, salt, max_tokens, vocabulary_size, and the ones only
/// their defaults are supported for (output_mode "int", invert false, sparse false,
/// idf_weights null, pad_to_max_tokens: meaningless in "int" mode).
Status read_index_lookup(LayerConfig& c, IndexLookupOptions& o);

/// A salt argument (Hashing's, the lookups'): null, one integer (used twice), or two.
Expected<std::optional<std::array<uint64_t, 2>>> read_salt(LayerConfig& c, const std::string& key);

/// `t` as a host int64 tensor of `shape` (host layers' outputs stay on the host).
Tensor& host_ints(Tensor& t, const Shape& shape);

}  // namespace troupe::core::layers
