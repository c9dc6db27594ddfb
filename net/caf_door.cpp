#include "net/caf_door.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/scribe_impl.hpp>

namespace troupe::net {

using core::Errc;
using core::make_error;

namespace {

// CAF's own connection on a Unix socket. CAF asks a connection for its peer's address and
// port (for the node's info) and aborts on a family other than IPv4/IPv6; this one answers
// for itself.
class LocalScribe : public caf::io::network::scribe_impl {
 public:
  LocalScribe(caf::io::network::default_multiplexer& mx, int fd, uint16_t key)
      : scribe_impl(mx, fd), key_(key) {}
  std::string addr() const override { return "local"; }
  uint16_t port() const override { return key_; }

 private:
  uint16_t key_;
};

}  // namespace

struct CafDoor::State {
  caf::actor_system& sys;
  uint16_t key;
  caf::actor basp;  // the broker CAF's doormen hand accepted connections to
  std::mutex mu;
  caf::actor served;
  bool closed = false;
};

CafDoor::CafDoor(caf::actor_system& sys, uint16_t key)
    : state_(new State{sys,
                       key,
                       sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP")),
                       {},
                       {},
                       false}) {}

CafDoor::~CafDoor() {
  close();
}

void CafDoor::serve(const caf::actor& actor) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->served = actor;
}

void CafDoor::close() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->closed = true;
  state_->served = nullptr;
}

core::Expected<Socket> CafDoor::connect() {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->closed || !state_->served)
    return make_error(Errc::unavailable, "the task serves no actor (yet or any more)");
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return make_error(Errc::unavailable, std::string("socketpair: ") + std::strerror(errno));
  Socket ours(fds[1]);
  auto& mm = state_->sys.middleman();
  auto& mx = static_cast<caf::io::network::default_multiplexer&>(mm.backend());
  caf::io::scribe_ptr scribe = caf::make_counted<LocalScribe>(mx, fds[0], state_->key);
  // What the broker does for a connection its doorman accepted: file the actor under the
  // key, write the server handshake, read BASP headers.
  caf::anon_send(state_->basp, caf::publish_atom::value, std::move(scribe), state_->key,
                 caf::actor_cast<caf::strong_actor_ptr>(state_->served), std::set<std::string>{});
  return ours;
}

}  // namespace troupe::net
