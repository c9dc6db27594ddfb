#include "net/auth.hpp"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/sha256.hpp"
#include "net/tls.hpp"

namespace troupe::net {

namespace {

using core::Errc;
using core::make_error;

// The first four bytes of both sides say whether the link goes on in TLS.
constexpr char plain_magic[4] = {'T', 'R', 'A', '1'};
constexpr char tls_magic[4] = {'T', 'R', 'S', '1'};
constexpr size_t magic_bytes = 4;

const char* magic_for(bool tls) {
  return tls ? tls_magic : plain_magic;
}

// What a peer's first four bytes say: 1 TLS, 0 plain, -1 not Troupe.
int mode_of(const char* first4) {
  if (std::memcmp(first4, tls_magic, magic_bytes) == 0) return 1;
  if (std::memcmp(first4, plain_magic, magic_bytes) == 0) return 0;
  return -1;
}

std::string mismatch(bool peer_tls, const char* peer) {
  return std::string(peer) +
         (peer_tls ? " encrypts its links and this process does not"
                   : " does not encrypt its links and this process does") +
         ": set " + tls_env + " the same for every task of the job";
}
constexpr size_t nonce_bytes = 32;
constexpr size_t min_secret = 16, max_secret = 4096;

core::Status random_bytes(char* out, size_t n) {
  while (n > 0) {
    const ssize_t got = ::getrandom(out, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io_error, std::string("getrandom: ") + std::strerror(errno));
    }
    out += got;
    n -= static_cast<size_t>(got);
  }
  return {};
}

// Reads exactly n bytes by `deadline`, however they are spread out: a peer sending a byte
// now and then gains nothing.
core::Status read_by(int fd, char* buf, size_t n, std::chrono::steady_clock::time_point deadline,
                     std::chrono::milliseconds budget, const char* what) {
  using namespace std::chrono;
  while (n > 0) {
    const auto left = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    const int ready = left <= 0 ? 0 : ::poll(&p, 1, static_cast<int>(left));
    // Too slow is not refused: a member's peer on a crowded host can be.
    if (ready == 0)
      return make_error(Errc::unavailable, std::string("no whole ") + what + " within " +
                                               std::to_string(budget.count()) + " ms");
    if (ready < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io_error, std::string("poll: ") + std::strerror(errno));
    }
    const ssize_t got = ::recv(fd, buf, n, 0);
    if (got == 0) return make_error(Errc::permission_denied, std::string("closed during ") + what);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return make_error(Errc::unavailable, std::string(what) + ": " + std::strerror(errno));
    }
    buf += got;
    n -= static_cast<size_t>(got);
  }
  return {};
}

core::Status send_bytes(const Socket& s, const std::string& bytes) {
  if (!send_all(s, bytes.data(), bytes.size()))
    return make_error(Errc::unavailable, std::string("handshake send: ") + std::strerror(errno));
  return {};
}

std::string proof(const std::string& secret, const char* label, const std::string& first,
                  const std::string& second) {
  const core::Digest d = core::hmac_sha256(secret, std::string(label) + first + second);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

bool same(const std::string& a, const std::string& b) {
  core::Digest x{}, y{};
  if (a.size() != x.size() || b.size() != y.size()) return false;
  std::memcpy(x.data(), a.data(), x.size());
  std::memcpy(y.data(), b.data(), y.size());
  return core::digest_equal(x, y);
}

core::Expected<std::string> secret_from_env() {
  if (const char* s = std::getenv(cluster_secret_env); s != nullptr && *s != '\0') {
    const std::string secret(s);
    if (secret.size() < min_secret || secret.size() > max_secret)
      return make_error(Errc::invalid_argument,
                        std::string(cluster_secret_env) + " must hold 16 to 4096 bytes");
    return secret;
  }
  const char* path = std::getenv(cluster_secret_file_env);
  if (path == nullptr || *path == '\0') return std::string();
  // A secret any user may rewrite is anyone's: refused (a read-only one shared with others,
  // as Kubernetes mounts a Secret by default, is the operator's choice).
  struct stat st {};
  if (::stat(path, &st) == 0 && (st.st_mode & S_IWOTH) != 0)
    return make_error(Errc::invalid_argument, std::string(cluster_secret_file_env) + "=" + path +
                                                  ": any user may write it (mode o+w)");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(Errc::invalid_argument, std::string(cluster_secret_file_env) + "=" + path +
                                                  ": cannot open (" + std::strerror(errno) + ")");
  std::string secret(max_secret + 1, '\0');
  in.read(secret.data(), static_cast<std::streamsize>(secret.size()));
  secret.resize(static_cast<size_t>(in.gcount()));
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r'))
    secret.pop_back();
  if (secret.size() < min_secret || secret.size() > max_secret)
    return make_error(Errc::invalid_argument, std::string(cluster_secret_file_env) + "=" + path +
                                                  ": the secret must be 16 to 4096 bytes");
  return secret;
}

}  // namespace

core::Expected<std::string> cluster_secret_from_env() {
  auto secret = secret_from_env();
  if (!secret) return secret;
  if (auto tls = tls_from_env(!secret->empty()); !tls) return tls.error();
  return secret;
}

core::Expected<std::string> new_cluster_secret(size_t bytes) {
  std::string raw(bytes, '\0');
  if (auto st = random_bytes(raw.data(), raw.size()); !st) return st.error();
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

core::Expected<Admission> Admission::make(const std::string& secret, bool tls,
                                          std::string identity) {
  Admission a;
  a.secret_ = secret;
  a.identity_ = std::move(identity);
  a.tls_ = tls;
  a.nonce_s_.assign(nonce_bytes, '\0');
  if (auto st = random_bytes(a.nonce_s_.data(), a.nonce_s_.size()); !st) return st.error();
  a.challenge_ = std::string(magic_for(tls), magic_bytes) + a.nonce_s_;
  a.hello_.assign(magic_bytes + nonce_bytes + 32, '\0');
  return a;
}

Admission::Step Admission::feed(const char* data, size_t n) {
  if (step_ != Step::more) return step_;
  auto refuse = [&](std::string why) {
    refusal_ = make_error(Errc::permission_denied, std::move(why));
    return step_ = Step::refused;
  };
  if (n > wanted()) return refuse("sent more than its hello before the server's proof");
  const bool had_magic = have_ >= magic_bytes;
  std::memcpy(hello_.data() + have_, data, n);
  have_ += n;
  // The magic first: a peer speaking anything else is refused on its first four bytes.
  if (!had_magic && have_ >= magic_bytes) {
    const int mode = mode_of(hello_.data());
    if (mode < 0) return refuse("not a Troupe handshake");
    if ((mode == 1) != tls_) return refuse(mismatch(mode == 1, "the peer"));
  }
  if (wanted() > 0) return step_;
  const std::string nonce_c = hello_.substr(magic_bytes, nonce_bytes);
  if (!same(hello_.substr(magic_bytes + nonce_bytes),
            proof(secret_, "troupe client", nonce_s_, nonce_c + identity_)))
    return refuse(identity_.empty() ? "no proof of the cluster secret"
                                    : "no proof of the cluster secret for " + identity_ +
                                          " (a stranger, or a member that dialled another task)");
  answer_ = proof(secret_, "troupe server", nonce_c, nonce_s_ + identity_);
  if (tls_) tls_key_ = proof(secret_, "troupe tls", nonce_s_, nonce_c);
  return step_ = Step::proven;
}

core::Status authenticate_peer(Socket& s, const std::string& secret,
                               std::chrono::milliseconds timeout, bool tls,
                               const std::string& identity) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto a = Admission::make(secret, tls, identity);
  if (!a) return a.error();
  if (auto st = send_bytes(s, a->challenge()); !st) return st;
  std::string buf;
  Admission::Step step = Admission::Step::more;
  while (step == Admission::Step::more) {
    // The magic alone first, so that a stranger is refused on it.
    buf.assign(a->wanted() == magic_bytes + nonce_bytes + 32 ? magic_bytes : a->wanted(), '\0');
    if (auto st = read_by(s.fd(), buf.data(), buf.size(), deadline, timeout, "handshake"); !st)
      return st;
    step = a->feed(buf.data(), buf.size());
  }
  if (step == Admission::Step::refused) return a->refusal();
  if (auto st = send_bytes(s, a->answer()); !st) return st;
  if (!tls) return {};
  return start_tls(s, /*server=*/true, a->tls_key(),
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                       deadline - std::chrono::steady_clock::now()));
}

core::Status authenticate_to(Socket& s, const std::string& secret,
                             std::chrono::milliseconds timeout, bool tls,
                             const std::string& dialled) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string challenge(magic_bytes + nonce_bytes, '\0');
  if (auto st = read_by(s.fd(), challenge.data(), challenge.size(), deadline, timeout, "challenge");
      !st)
    return st;
  const int mode = mode_of(challenge.data());
  if (mode < 0) return make_error(Errc::permission_denied, "the server sent no Troupe challenge");
  const std::string nonce_s = challenge.substr(magic_bytes);
  std::string nonce_c(nonce_bytes, '\0');
  if (auto st = random_bytes(nonce_c.data(), nonce_c.size()); !st) return st;
  // Sent even when the modes differ, so that the server names the difference too.
  if (auto st = send_bytes(s, std::string(magic_for(tls), magic_bytes) + nonce_c +
                                  proof(secret, "troupe client", nonce_s, nonce_c + dialled));
      !st)
    return st;
  if ((mode == 1) != tls)
    return make_error(Errc::permission_denied, mismatch(mode == 1, "the server"));
  std::string answer(32, '\0');
  if (auto st = read_by(s.fd(), answer.data(), answer.size(), deadline, timeout, "server proof");
      !st)
    return make_error(
        st.error().code == Errc::unavailable ? Errc::unavailable : Errc::permission_denied,
        "the server did not prove the cluster secret (" + st.error().message + ")");
  if (!same(answer, proof(secret, "troupe server", nonce_c, nonce_s + dialled)))
    return make_error(Errc::permission_denied,
                      dialled.empty() ? "the server did not prove the cluster secret"
                                      : "the server did not prove the cluster secret as " +
                                            dialled + " (a stranger, or another task)");
  if (!tls) return {};
  return start_tls(s, /*server=*/false, proof(secret, "troupe tls", nonce_s, nonce_c),
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                       deadline - std::chrono::steady_clock::now()));
}

core::Status admit_member(Socket& s, const std::string& secret, std::chrono::milliseconds timeout,
                          const std::string& identity) {
  if (secret.empty()) return {};
  return authenticate_peer(s, secret, timeout, links_encrypted(), identity);
}

core::Status prove_membership(Socket& s, const std::string& secret,
                              std::chrono::milliseconds timeout, const std::string& dialled) {
  if (secret.empty()) return {};
  return authenticate_to(s, secret, timeout, links_encrypted(), dialled);
}

}  // namespace troupe::net
