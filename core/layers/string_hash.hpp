#pragma once

// The two string hashes Keras's preprocessing layers bin with (through TensorFlow), so that
// Troupe's Hashing, StringLookup and IntegerLookup give Keras's bins bit for bit:
//   fingerprint64    FarmHash's Fingerprint64 (farmhashna::Hash64), what
//                    tf.strings.to_hash_bucket_fast uses (Hashing without a salt);
//   siphash64        SipHash-2-4 keyed by two 64-bit words, what
//                    tf.strings.to_hash_bucket_strong uses (Hashing with a salt).
// A bin is the hash modulo the number of bins, as unsigned 64-bit integers.
//
//   int64_t bin = static_cast<int64_t>(fingerprint64("cat") % 10);

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::core::layers {

uint64_t fingerprint64(std::string_view s);
uint64_t siphash64(uint64_t key0, uint64_t key1, std::string_view s);

/// An integer as TensorFlow's as_string writes it (decimal, '-' for negatives): what Keras
/// hashes for an integer input.
std::string decimal(int64_t v);

}  // namespace troupe::core::layers
