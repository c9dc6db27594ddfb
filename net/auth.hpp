#pragma once

// Membership of a job: a cluster secret every task holds, and a mutual challenge-response
// on each new connection that proves it without sending it. A stranger is refused before
// it can send a single frame, so it costs the server 68 bytes and one bounded wait.
//
//   server -> client  "TRA1" nonce_s (32 random bytes)
//   client -> server  "TRA1" nonce_c  HMAC-SHA256(secret, "troupe client" nonce_s nonce_c who)
//   server -> client  HMAC-SHA256(secret, "troupe server" nonce_c nonce_s who)
//
// `who` is the task the client dialled ("ps:1", "ring rank 2"), which the server must be:
// the proof binds the task's identity, not only the job's.
//
// Nonces make every proof new (a recorded handshake replays nothing); the two labels keep
// a server's proof from passing for a client's. With TLS (net/tls.hpp) both sides say
// "TRS1" instead, and the link goes on in TLS 1.3 keyed by
// HMAC-SHA256(secret, "troupe tls" nonce_s nonce_c); sides that disagree are refused with
// a message naming TROUPE_TLS.

#include <chrono>
#include <string>

#include "core/expected.hpp"
#include "net/channel.hpp"
#include "net/tls.hpp"

namespace troupe::net {

/// Environment variables: the secret itself, or a file holding it (16 to 4096 bytes).
inline constexpr const char* cluster_secret_env = "TROUPE_CLUSTER_SECRET";
inline constexpr const char* cluster_secret_file_env = "TROUPE_CLUSTER_SECRET_FILE";

/// The job's secret from the environment; empty when neither variable is set (then
/// connections are not authenticated). A secret shorter than 16 bytes, or a file that
/// cannot be read or is out of bounds, is an invalid_argument error naming it; so is a
/// TROUPE_TLS that tls_from_env refuses (TLS without a secret, an unknown value).
core::Expected<std::string> cluster_secret_from_env();

/// A fresh random secret of `bytes` bytes, hex-encoded (what `troupe launch` gives a job).
core::Expected<std::string> new_cluster_secret(size_t bytes = 32);

/// The server's side of the handshake as a state machine, for an acceptor that holds many
/// unproven connections at once without a thread each (net/connection_server.hpp): send
/// challenge() on accept, feed() the peer's bytes as they come (at most wanted() at a
/// time: nothing past the hello is read), and once proven send answer(). A peer that
/// speaks anything but Troupe is refused on its first four bytes.
class Admission {
 public:
  enum class Step { more, proven, refused };
  /// Fails only when the system has no randomness for the nonce. `identity` names this
  /// side ("ps:1"): the peer's proof must be for it, and ours says it.
  static core::Expected<Admission> make(const std::string& secret, bool tls,
                                        std::string identity = {});
  const std::string& challenge() const { return challenge_; }
  /// How many more bytes the peer's hello has.
  size_t wanted() const { return hello_.size() - have_; }
  Step feed(const char* data, size_t n);
  /// The server's proof, once proven.
  const std::string& answer() const { return answer_; }
  /// Why the peer was refused (permission_denied).
  const core::Error& refusal() const { return refusal_; }
  /// The TLS session's key, once proven with tls.
  const std::string& tls_key() const { return tls_key_; }
  bool tls() const { return tls_; }

 private:
  Admission() = default;
  std::string secret_, identity_, nonce_s_, challenge_, hello_, answer_, tls_key_;
  size_t have_ = 0;
  bool tls_ = false;
  Step step_ = Step::more;
  core::Error refusal_;
};

/// The server's side of the handshake on a just-accepted connection, all of it within
/// `timeout` (a total, not a wait per byte). A peer that does not prove the secret, or does
/// not agree on `tls`, is `permission_denied`. With `tls` the socket then carries a TLS
/// session.
core::Status authenticate_peer(Socket& s, const std::string& secret,
                               std::chrono::milliseconds timeout, bool tls = links_encrypted(),
                               const std::string& identity = {});
/// The client's side, right after connecting, also within `timeout` in all: the server
/// must prove the secret too.
/// `dialled` names the task meant ("ps:1"): both proofs are for it, so a peer that proves
/// the secret but is another task (two tasks given one address, a stale address) is
/// refused as well as a stranger. Empty on both sides: no identity bound.
core::Status authenticate_to(Socket& s, const std::string& secret,
                             std::chrono::milliseconds timeout, bool tls = links_encrypted(),
                             const std::string& dialled = {});

/// What every link of a job does right after accepting (admit_member) or connecting
/// (prove_membership): the handshake above with the job's secret; nothing when it is empty.
core::Status admit_member(Socket& s, const std::string& secret, std::chrono::milliseconds timeout,
                          const std::string& identity = {});
core::Status prove_membership(Socket& s, const std::string& secret,
                              std::chrono::milliseconds timeout, const std::string& dialled = {});

}  // namespace troupe::net
