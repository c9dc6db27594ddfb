#pragma once

// The CPU ring behind the collective interface: host buffers only.

#include <functional>
#include <memory>

#include "actors/collective/ring.hpp"
#include "core/collective/collective.hpp"

namespace troupe::collective {

class RingImplementation final : public Implementation {
 public:
  explicit RingImplementation(std::unique_ptr<Ring> ring)
      : owned_(std::move(ring)), current_([this]() -> Ring& { return *owned_; }) {}
  /// A ring owned elsewhere that may be replaced (the elastic ring's current one).
  explicit RingImplementation(std::function<Ring&()> current) : current_(std::move(current)) {}

  Communication kind() const override { return Communication::ring; }
  const char* name() const override { return "ring"; }
  bool enabled(const AllReduceOptions& o) const override { return o.memory == Memory::host; }

  core::Status all_reduce(const AllReduceOptions& o) override {
    Ring& ring = current_();
    const auto saved = ring.timeout();
    if (o.timeout.count() > 0) ring.set_timeout(o.timeout);
    auto st = ring.all_reduce(o.inputs, o.reduction, o.tag, o.wire);
    ring.set_timeout(saved);
    return st;
  }

  Ring& ring() { return current_(); }

 private:
  std::unique_ptr<Ring> owned_;
  std::function<Ring&()> current_;
};

}  // namespace troupe::collective
