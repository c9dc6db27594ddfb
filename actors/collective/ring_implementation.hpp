#pragma once

// The CPU ring behind the collective interface: host buffers only.

#include <memory>

#include "actors/collective/ring.hpp"
#include "core/collective/collective.hpp"

namespace troupe::collective {

class RingImplementation final : public Implementation {
 public:
  explicit RingImplementation(std::unique_ptr<Ring> ring) : ring_(std::move(ring)) {}

  Communication kind() const override { return Communication::ring; }
  const char* name() const override { return "ring"; }
  bool enabled(const AllReduceOptions& o) const override { return o.memory == Memory::host; }

  core::Status all_reduce(const AllReduceOptions& o) override {
    const auto saved = ring_->timeout();
    if (o.timeout.count() > 0) ring_->set_timeout(o.timeout);
    auto st = ring_->all_reduce(o.inputs, o.reduction, o.tag);
    ring_->set_timeout(saved);
    return st;
  }

  Ring& ring() { return *ring_; }

 private:
  std::unique_ptr<Ring> ring_;
};

}  // namespace troupe::collective
