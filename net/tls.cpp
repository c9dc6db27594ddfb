#include "net/tls.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace troupe::net {

using core::Errc;
using core::make_error;

struct TlsSession {
  SSL* ssl = nullptr;  // owns the BIO
  int fd = -1;
  int io_flags = 0;  // MSG_DONTWAIT for the call in progress
  std::string key;
  ~TlsSession() {
    if (ssl != nullptr) SSL_free(ssl);
  }
};

void TlsSessionFree::operator()(TlsSession* t) const {
  delete t;
}

namespace {

constexpr const char* psk_identity = "troupe";

// A BIO over the socket's descriptor. OpenSSL's own socket BIO writes with write(), which
// raises SIGPIPE when the peer is gone; this one sends with MSG_NOSIGNAL, and with the
// session's MSG_DONTWAIT for calls that must not block.
TlsSession* session_of(BIO* b) {
  return static_cast<TlsSession*>(BIO_get_data(b));
}

int bio_write(BIO* b, const char* in, int n) {
  BIO_clear_retry_flags(b);
  const TlsSession* t = session_of(b);
  ssize_t w;
  do {
    w = ::send(t->fd, in, static_cast<size_t>(n), MSG_NOSIGNAL | t->io_flags);
  } while (w < 0 && errno == EINTR);
  if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(b);
  return static_cast<int>(w);
}

int bio_read(BIO* b, char* out, int n) {
  BIO_clear_retry_flags(b);
  const TlsSession* t = session_of(b);
  ssize_t r;
  do {
    r = ::recv(t->fd, out, static_cast<size_t>(n), t->io_flags);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(b);
  return static_cast<int>(r);
}

long bio_ctrl(BIO*, int cmd, long, void*) {
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

int bio_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

BIO_METHOD* socket_method() {
  static BIO_METHOD* m = [] {
    BIO_METHOD* made = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "troupe socket");
    BIO_meth_set_write(made, bio_write);
    BIO_meth_set_read(made, bio_read);
    BIO_meth_set_ctrl(made, bio_ctrl);
    BIO_meth_set_create(made, bio_create);
    return made;
  }();
  return m;
}

unsigned copy_key(SSL* ssl, unsigned char* psk, unsigned max_psk) {
  const auto* t = static_cast<const TlsSession*>(SSL_get_app_data(ssl));
  if (t == nullptr || t->key.size() > max_psk) return 0;
  std::memcpy(psk, t->key.data(), t->key.size());
  return static_cast<unsigned>(t->key.size());
}

unsigned client_psk(SSL* ssl, const char*, char* identity, unsigned max_identity,
                    unsigned char* psk, unsigned max_psk) {
  if (std::strlen(psk_identity) + 1 > max_identity) return 0;
  std::strcpy(identity, psk_identity);
  return copy_key(ssl, psk, max_psk);
}

unsigned server_psk(SSL* ssl, const char* identity, unsigned char* psk, unsigned max_psk) {
  if (identity == nullptr || std::strcmp(identity, psk_identity) != 0) return 0;
  return copy_key(ssl, psk, max_psk);
}

// TLS 1.3 only, with SHA-256 suites (what a PSK from the legacy callbacks is used with), no
// session tickets (every connection runs its own handshake), writes that may return after
// a part (the ring's non-blocking loop) and EOF without close_notify read as end of stream
// (the channel's frames carry their own lengths, so a cut frame is still caught).
SSL_CTX* make_context(bool server) {
  SSL_CTX* c = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (c == nullptr) return nullptr;
  SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_options(c, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(c, 0);
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (server)
    SSL_CTX_set_psk_server_callback(c, server_psk);
  else
    SSL_CTX_set_psk_client_callback(c, client_psk);
  return c;
}

SSL_CTX* context(bool server) {
  static SSL_CTX* const server_ctx = make_context(true);
  static SSL_CTX* const client_ctx = make_context(false);
  return server ? server_ctx : client_ctx;
}

// OpenSSL's reasons for the last failure, emptying this thread's error queue.
std::string openssl_reasons() {
  std::string out;
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    if (!out.empty()) out += "; ";
    const char* reason = ERR_reason_error_string(e);
    out += reason != nullptr ? reason : text;
  }
  return out;
}

// The result of a failed read or write, as ::recv or ::send would give it.
ssize_t failed(SSL* ssl, int ret) {
  const int saved = errno;
  switch (SSL_get_error(ssl, ret)) {
    case SSL_ERROR_ZERO_RETURN:
      return 0;
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_SYSCALL:
      ERR_clear_error();
      errno = saved != 0 ? saved : ECONNRESET;
      return -1;
    default: {
      const std::string why = openssl_reasons();
      std::fprintf(stderr, "troupe: TLS link ended: %s (bytes changed or not TLS)\n",
                   why.empty() ? "protocol error" : why.c_str());
      errno = EBADMSG;
      return -1;
    }
  }
}

bool word_is(const char* v, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (std::strcmp(v, w) == 0) return true;
  return false;
}

std::atomic<int>& encryption_state() {  // -1: not read yet
  static std::atomic<int> state{-1};
  return state;
}

}  // namespace

core::Expected<bool> tls_from_env(bool have_secret) {
  const char* v = std::getenv(tls_env);
  if (v == nullptr || word_is(v, {"", "0", "off", "false"})) return false;
  if (!word_is(v, {"1", "on", "true"}))
    return make_error(Errc::invalid_argument,
                      std::string(tls_env) + "='" + v + "': expected 1, on, true, 0, off or false");
  if (!have_secret)
    return make_error(Errc::invalid_argument,
                      std::string(tls_env) +
                          " needs a cluster secret (TROUPE_CLUSTER_SECRET or "
                          "TROUPE_CLUSTER_SECRET_FILE; troupe launch makes one)");
  return true;
}

bool links_encrypted() {
  auto& state = encryption_state();
  int s = state.load();
  if (s < 0) {
    auto on = tls_from_env(true);
    s = on.ok() && *on ? 1 : 0;
    state.store(s);
  }
  return s == 1;
}

void set_links_encrypted(bool on) {
  encryption_state().store(on ? 1 : 0);
}

core::Status start_tls(Socket& s, bool server, const std::string& key,
                       std::chrono::milliseconds timeout) {
  SSL_CTX* ctx = context(server);
  if (ctx == nullptr) return make_error(Errc::internal, "TLS: no context: " + openssl_reasons());
  std::unique_ptr<TlsSession, TlsSessionFree> t(new TlsSession);
  t->fd = s.fd();
  t->key = key;
  ERR_clear_error();
  t->ssl = SSL_new(ctx);
  BIO* bio = t->ssl != nullptr ? BIO_new(socket_method()) : nullptr;
  if (bio == nullptr) return make_error(Errc::internal, "TLS: " + openssl_reasons());
  BIO_set_data(bio, t.get());
  SSL_set_bio(t->ssl, bio, bio);
  SSL_set_app_data(t->ssl, t.get());
  if (server)
    SSL_set_accept_state(t->ssl);
  else
    SSL_set_connect_state(t->ssl);
  // Driven without blocking, so that the whole handshake keeps to `timeout`.
  t->io_flags = MSG_DONTWAIT;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    ERR_clear_error();
    const int r = SSL_do_handshake(t->ssl);
    if (r == 1) break;
    const int e = SSL_get_error(t->ssl, r);
    const short events =
        e == SSL_ERROR_WANT_READ ? POLLIN : (e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0);
    if (events == 0) {
      std::string why = openssl_reasons();
      if (why.empty()) why = e == SSL_ERROR_SYSCALL ? "connection closed" : "protocol error";
      return make_error(Errc::permission_denied, "TLS handshake failed: " + why);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return make_error(Errc::permission_denied,
                        "no TLS handshake within " + std::to_string(timeout.count()) + " ms");
    pollfd p{s.fd(), events, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR)
      return make_error(Errc::io_error, std::string("poll: ") + std::strerror(errno));
  }
  t->io_flags = 0;
  s.set_tls(std::move(t));
  return {};
}

namespace {

// One SSL_read_ex or SSL_write_ex, with the caller's MSG_DONTWAIT, as ::recv/::send report.
template <class Call>
ssize_t through(TlsSession* t, int flags, Call call) {
  t->io_flags = flags & MSG_DONTWAIT;
  ERR_clear_error();
  size_t moved = 0;
  const int ok = call(t->ssl, &moved);
  t->io_flags = 0;
  return ok == 1 ? static_cast<ssize_t>(moved) : failed(t->ssl, ok);
}

}  // namespace

ssize_t recv_some(const Socket& s, void* buf, size_t n, int flags) {
  TlsSession* t = s.tls();
  if (t == nullptr) {
    ssize_t r;
    do {
      r = ::recv(s.fd(), buf, n, flags);
    } while (r < 0 && errno == EINTR);
    return r;
  }
  if (n == 0) return 0;
  return through(t, flags, [&](SSL* ssl, size_t* got) { return SSL_read_ex(ssl, buf, n, got); });
}

ssize_t send_some(const Socket& s, const void* buf, size_t n, int flags) {
  TlsSession* t = s.tls();
  if (t == nullptr) {
    ssize_t w;
    do {
      w = ::send(s.fd(), buf, n, flags | MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    return w;
  }
  if (n == 0) return 0;
  return through(t, flags, [&](SSL* ssl, size_t* sent) { return SSL_write_ex(ssl, buf, n, sent); });
}

bool send_all(const Socket& s, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = send_some(s, p, n);
    if (w < 0) return false;
    if (w == 0) {
      errno = ECONNRESET;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

size_t buffered(const Socket& s) {
  const TlsSession* t = s.tls();
  return t == nullptr ? 0 : static_cast<size_t>(SSL_pending(t->ssl));
}

}  // namespace troupe::net
