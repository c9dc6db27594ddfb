#pragma once

// Encrypted links: TLS 1.3 (OpenSSL) on a TCP connection whose two ends have just proved
// the cluster secret to each other (net/auth.hpp). No certificates: the key both ends
// give TLS is derived from the secret and the two nonces of that handshake, so it is new
// for every connection, and TLS adds an ECDHE exchange on top (psk_dhe_ke): a secret that
// leaks later decrypts no recorded traffic. After it every byte of the link is encrypted
// and authenticated (AES-128-GCM records); a changed, dropped or replayed byte ends the
// link with an error instead of reaching the reader.
//
// Chosen per process with TROUPE_TLS (every task of a job must agree; the handshake says
// so by name when they do not). Shared-memory links between tasks of one host carry no
// network bytes and stay as they are.

#include <chrono>
#include <string>

#include "core/expected.hpp"
#include "net/socket.hpp"

namespace troupe::net {

/// Environment variable: "1" (or "on", "true") encrypts every TCP link of the process;
/// "0", "off", "false" or unset does not. It needs a cluster secret.
inline constexpr const char* tls_env = "TROUPE_TLS";

/// TROUPE_TLS read and checked: an unknown value, or TLS without a cluster secret
/// (`have_secret` false), is an invalid_argument error naming the variable.
core::Expected<bool> tls_from_env(bool have_secret);

/// Whether this process's links use TLS: TROUPE_TLS on first use (an invalid value counts as
/// off: tls_from_env reports it where the process starts). Tests may set it.
bool links_encrypted();
void set_links_encrypted(bool on);

/// TLS 1.3 on a connected socket, keyed by `key` (both ends must hold the same bytes), as
/// the server or the client; the handshake's reads and writes wait at most `timeout` in
/// all. Afterwards the socket carries the session: recv_some and send_some go through it.
core::Status start_tls(Socket& s, bool server, const std::string& key,
                       std::chrono::milliseconds timeout);

}  // namespace troupe::net
