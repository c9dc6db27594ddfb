#pragma once

// CAF's side of a gate, with nothing listening: CAF 0.17 serves BASP to whoever reaches
// its port, so behind a gate (net/gate.hpp) CAF has no port at all. Each connection the
// gate has admitted gets a fresh socket pair; one end goes to this actor system's BASP
// broker as a connection accepted for the served actor, the gate relays to the other.
// No other process can reach it: it has no address.

#include <cstdint>
#include <memory>

#include "core/expected.hpp"
#include "net/socket.hpp"

namespace caf {
class actor;
class actor_system;
}  // namespace caf

namespace troupe::net {

class CafDoor {
 public:
  /// `key` is the number CAF files the served actor under, as it would a published port
  /// (it listens on none); any nonzero number no other publish() of the system uses.
  CafDoor(caf::actor_system& sys, uint16_t key);
  ~CafDoor();
  CafDoor(const CafDoor&) = delete;
  CafDoor& operator=(const CafDoor&) = delete;

  /// The actor a new connection finds (a restarted worker replaces the one before it).
  void serve(const caf::actor& actor);
  /// A new connection to this actor system, its BASP server handshake naming the served
  /// actor. Thread-safe; unavailable before serve() and after close().
  core::Expected<Socket> connect();
  /// No more connections: for the actor system's end (connect() must not reach it).
  void close();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace troupe::net
