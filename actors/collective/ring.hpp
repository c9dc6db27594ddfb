#pragma once

// A ring of ranks over plain TCP for all-reduce: each rank sends to its right neighbour
// and receives from its left one, on connections of their own (CAF stays the control
// plane; these carry the bulk bytes). Sum and mean of float32 buffers by ring
// reduce-scatter + all-gather, both directions of a step on the wire at once, with small
// tensors fused into buckets, optionally carried as bfloat16 (half the bytes; every rank
// adds in float32 and ends with the same values). Where a neighbour turns out to be on the same
// host, the bulk bytes of that direction go through a shared-memory ring buffer instead (the TCP
// connection still carries headers and tells when the neighbour is gone).

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/collective/shm_link.hpp"
#include "core/collective/collective.hpp"
#include "core/device.hpp"
#include "core/expected.hpp"
#include "core/tensor.hpp"
#include "net/channel.hpp"

namespace troupe::collective {

/// What one rank is doing in its collectives, shared with the thread that answers other
/// ranks' stall queries (the elastic ring's door): the collective it is in or was last in,
/// and the recent ones it entered.
class RingProgress {
 public:
  struct Snapshot {
    std::string tag;           // the collective it is in, or the last one it was in
    bool inside = false;       // in it now
    bool failed = false;       // (not inside) it ended with an error
    uint64_t collectives = 0;  // entered so far
    int64_t ms = 0;            // since it entered (inside) or left it
  };
  void enter(const std::string& tag);
  void leave(bool ok);
  Snapshot snapshot() const;
  /// Whether `tag` is among the last collectives entered (it has submitted it).
  bool entered(const std::string& tag) const;

 private:
  static constexpr size_t history = 64;
  mutable std::mutex mu_;
  Snapshot now_;
  std::chrono::steady_clock::time_point at_{};
  std::deque<std::string> recent_;
};

struct RingOptions {
  /// How long forming the ring may take (the other ranks start when they start).
  std::chrono::milliseconds connect_timeout{30000};
  /// How long a rank waits for its left neighbour's bytes in a collective before giving up
  /// with an error naming the neighbour and the tensor (the stall report).
  std::chrono::milliseconds timeout{60000};
  /// Tensors smaller than this are packed together into buckets of up to this size.
  size_t fusion_bytes = size_t{4} << 20;
  /// Identifies the job: a connection from another group is refused.
  uint64_t group_id = 0;
  /// The job's cluster secret (net/auth.hpp): every link proves it both ways before its
  /// first byte (the elastic ring's knocks too). Empty: links are not authenticated.
  std::string secret;
  /// Where this rank records its collectives (shared with whoever answers for it); none:
  /// not recorded.
  std::shared_ptr<RingProgress> progress;
  /// Called on a stall (a neighbour silent past the timeout) with the collective's tag:
  /// what it returns (every rank's view, say) is added to the error. None: the report
  /// names the neighbour waited for only.
  std::function<std::string(const std::string& tag)> explain_stall;
  /// Offer each right neighbour a shared-memory link (taken where it is on this host).
  bool shared_memory = true;
  /// The ring buffer of each such link.
  size_t shared_memory_bytes = size_t{4} << 20;
};

/// What one rank did (for benchmarks and tests).
struct RingStats {
  uint64_t collectives = 0;
  uint64_t bytes_sent = 0;
  uint64_t buckets = 0;
  /// Directions (to the right, from the left) that go through shared memory: 0 to 2.
  int shared_memory_links = 0;
  /// Of its two TCP connections, how many carry TLS (net/tls.hpp): 0 to 2.
  int tls_links = 0;
};

class Ring {
 public:
  /// Forms the ring: rank `rank` of `addresses.size()` listens on addresses[rank]
  /// ("host:port"), connects to its right neighbour (retrying until connect_timeout) and
  /// accepts its left one, checking its hello (group and rank); anything else that
  /// connects is refused and the rank goes on waiting. One rank needs no sockets.
  static core::Expected<std::unique_ptr<Ring>> form(int rank, std::vector<std::string> addresses,
                                                    RingOptions options = {});
  /// A ring over connections made elsewhere (the elastic group's rendezvous): `left` comes
  /// from rank - 1, `right` goes to rank + 1. With one rank both are empty.
  static core::Expected<std::unique_ptr<Ring>> from_links(int rank, int size, net::Socket left,
                                                          net::Socket right,
                                                          RingOptions options = {});
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const RingStats& stats() const { return stats_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  void set_timeout(std::chrono::milliseconds t) { options_.timeout = t; }
  /// Ends both connections: the neighbours' next read or write fails at once (a rank that
  /// gives up on a collective passes the failure on instead of leaving them to time out).
  void shut_down();

  /// Reduces `n` floats at `data` across the ring in place; every rank must call it with
  /// the same `tag` and `n`. A rank whose left neighbour sends another tag or size gets an
  /// invalid_argument error naming both; one that hears nothing within the timeout gets
  /// an unavailable error naming the neighbour it waited for and the tag. After any failed
  /// collective the ring is closed (its neighbours fail at once): form a new one.
  /// `wire` bfloat16: the floats travel as bfloat16 (rounded to nearest even), each rank
  /// adding what arrives to its float32 sums; the rank that finishes a chunk rounds it to
  /// bfloat16 before it goes round, so that every rank ends with the same values (within
  /// about 2^-8 relative per step of the ring of the float32 result). Every rank must ask
  /// for the same wire type (a mismatch is named like one of the tag).
  core::Status all_reduce(float* data, size_t n, Reduction op, const std::string& tag,
                          core::DType wire = core::DType::float32);
  /// All-reduces several tensors as one collective: tensors under fusion_bytes are packed
  /// into buckets (one ring pass per bucket), larger ones go alone, in place.
  core::Status all_reduce(const std::vector<core::TensorView>& tensors, Reduction op,
                          const std::string& tag, core::DType wire = core::DType::float32);
  core::Status all_reduce(const std::vector<Buffer>& buffers, Reduction op, const std::string& tag,
                          core::DType wire = core::DType::float32);
  /// Copies rank `root`'s `n` floats at `data` to every rank (passed round the ring in
  /// pieces, each forwarded as soon as it arrived). Same tag and n everywhere.
  core::Status broadcast(float* data, size_t n, int root, const std::string& tag);

 private:
  Ring(int rank, int size, RingOptions options);
  /// Sends `ns` bytes to the right while receiving `nr` from the left. The bytes received
  /// land in `recv`, or, with `add_to`, are added to the floats there piece by piece as they
  /// arrive (the reduce-scatter: the reduction hides behind the receive; over TCP `recv`
  /// is the landing space, over shared memory they are added straight from the link);
  /// `arriving` says whether the bytes are float32 or bfloat16 elements.
  /// `bulk`: may use the shared-memory links (not for headers).
  core::Status exchange(const char* send, size_t ns, char* recv, size_t nr, const std::string& what,
                        float* add_to = nullptr, bool bulk = true,
                        core::DType arriving = core::DType::float32);
  /// Offers and takes the shared-memory links (from_links; both neighbours at once).
  core::Status share_memory();
  /// A neighbour whose connection has closed, while its shared-memory link is waited on.
  /// Waits up to `wait_ms` for a sign of one.
  core::Status check_neighbours(bool sending, bool receiving, const std::string& what, int wait_ms);
  /// Both neighbours name the collective before any data moves.
  core::Status check_header(const std::string& tag, size_t n, core::DType wire);
  /// Reduce-scatter then all-gather of n floats, carried as `wire` (float32 or bfloat16).
  core::Status ring_pass(float* data, size_t n, const std::string& tag, core::DType wire);
  /// Closes the ring after a failed collective `tag`; a stall is explained
  /// (options_.explain_stall) before the error is returned.
  core::Status failed(core::Status st, const std::string& tag);
  /// A top-level collective's outcome, recorded in options_.progress.
  core::Status ended(core::Status st);

  int rank_, size_;
  RingOptions options_;
  net::Socket right_, left_;
  ShmLink out_, in_;  // to the right, from the left; empty: that direction uses TCP
  std::vector<float> scratch_;
  std::vector<float> bucket_;
  std::vector<uint16_t> out16_, in16_;  // bfloat16 collectives: what goes out, what lands
  RingStats stats_;
  bool broken_ = false;
  bool stalled_ = false;  // the last exchange ran past the timeout
};

}  // namespace troupe::collective
