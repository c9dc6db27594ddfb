#pragma once

// A one-way byte stream between two processes on one host: a ring buffer in a POSIX
// shared-memory segment with a written and a read counter. The ring uses one per
// direction when its neighbour turns out to be on the same host, so that bulk bytes are
// copied once in and once out (the reduction reads them in place) instead of crossing
// the loopback TCP stack. The TCP connection stays for headers and for noticing a
// neighbour that is gone.
//
//   producer: auto out = ShmLink::create(4 << 20);  send out->offer() over the socket
//   consumer: auto in = ShmLink::open(offer);        reply whether it worked
//   producer: out->unlink();                         the name goes; the mapping stays
//   out->write(bytes, n) / in->peek(n, &m) ... in->consume(m)

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/expected.hpp"

namespace troupe::collective {

class ShmLink {
 public:
  /// What the producer sends its consumer (64 bytes on the wire, packed by layout): the
  /// segment's name and a random nonce that the consumer finds in the segment's header,
  /// so that a segment of the same name on another host, or a stale one, is never used.
  struct Offer {
    uint32_t magic = 0;  // offer_magic when a segment is offered, 0 when none is
    uint32_t reserved = 0;
    uint64_t nonce = 0;
    uint64_t capacity = 0;
    char name[40] = {};
  };
  static constexpr uint32_t offer_magic = 0x31535254;  // "TRS1"

  /// A new segment with a ring buffer of `capacity` bytes (a multiple of 4096).
  static core::Expected<ShmLink> create(size_t capacity);
  /// Maps the segment `offer` names and checks its header against the offer.
  static core::Expected<ShmLink> open(const Offer& offer);

  ShmLink() = default;
  ShmLink(ShmLink&& o) noexcept;
  ShmLink& operator=(ShmLink&& o) noexcept;
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;
  ~ShmLink();

  explicit operator bool() const { return header_ != nullptr; }
  Offer offer() const;
  /// Removes the segment's name (producer, once the consumer has answered); both
  /// mappings stay valid until they are unmapped.
  void unlink();

  /// Producer: copies up to `n` bytes in (as much as fits, at most one piece) and
  /// publishes them. Returns how many; 0 when the buffer is full.
  size_t write(const char* src, size_t n);
  /// Consumer: the next readable bytes, contiguous, at most `n` and one piece; `*m` says
  /// how many (0: none yet). They stay valid until consume().
  const char* peek(size_t n, size_t* m) const;
  void consume(size_t m);

 private:
  struct Header;
  void reset();
  Header* header_ = nullptr;
  char* data_ = nullptr;
  size_t capacity_ = 0;
  size_t mapped_ = 0;
  std::string name_;
  bool owner_ = false;
};

}  // namespace troupe::collective
