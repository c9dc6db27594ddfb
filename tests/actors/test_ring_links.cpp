// The ring's shared-memory links: bytes in order across the wrap-round, a mismatched offer
// refused, stale names of dead creators removed, nothing left behind by a formed ring.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <thread>

#include <catch2/catch.hpp>

#include "actors/collective/ring.hpp"
#include "actors/collective/ring_implementation.hpp"
#include "helpers.hpp"
#include "net/auth.hpp"
#include "process.hpp"
#include "ring_ranks.hpp"

using namespace troupe;
using collective::Reduction;
using collective::Ring;
using collective::RingOptions;
using test::on_ranks;
using test::shm_available;
using test::value;

TEST_CASE("a shared-memory link streams bytes in order across its wrap-round", "[ring][shm]") {
  if (!shm_available()) {
    WARN("no /dev/shm here: skipped");
    return;
  }
  auto out = collective::ShmLink::create(8192);
  REQUIRE(out.ok());
  auto in = collective::ShmLink::open(out->offer());
  REQUIRE(in.ok());
  out->unlink();
  // 5000 bytes at a time through 8 KiB: the second write only fits in part, the reads see
  // each byte once, in order.
  std::vector<char> sent(50000), got;
  for (size_t i = 0; i < sent.size(); ++i)
    sent[i] = static_cast<char>(i * 31 % 251);
  size_t at = 0;
  while (got.size() < sent.size()) {
    at += out->write(sent.data() + at, std::min<size_t>(5000, sent.size() - at));
    size_t m = 0;
    const char* p = in->peek(3000, &m);
    got.insert(got.end(), p, p + m);
    in->consume(m);
  }
  CHECK(got == sent);
  size_t m = 1;
  in->peek(100, &m);
  CHECK(m == 0);  // nothing more
}

TEST_CASE("a shared-memory offer that does not match its segment is refused", "[ring][shm]") {
  if (!shm_available()) {
    WARN("no /dev/shm here: skipped");
    return;
  }
  auto out = collective::ShmLink::create(4096);
  REQUIRE(out.ok());
  auto offer = out->offer();
  offer.nonce ^= 1;  // a stale segment, or one of the same name on another host
  auto in = collective::ShmLink::open(offer);
  REQUIRE_FALSE(in.ok());
  CHECK_THAT(in.error().message, Catch::Contains("not the one offered"));
  out->unlink();
  auto gone = collective::ShmLink::open(out->offer());
  REQUIRE_FALSE(gone.ok());  // the name is gone once unlinked
  CHECK_THAT(gone.error().message, Catch::Contains("shm_open"));
  collective::ShmLink::Offer junk;
  junk.magic = 0x12345678;
  CHECK_FALSE(collective::ShmLink::open(junk).ok());
  CHECK_FALSE(collective::ShmLink::create(1000).ok());  // not whole pages
}

TEST_CASE("a new shared-memory link removes the names of creators that are gone", "[ring][shm]") {
  if (!shm_available()) {
    WARN("no /dev/shm here: skipped");
    return;
  }
  // A pid that no longer exists: a child that has exited and been reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  auto make_name = [](pid_t pid) {
    return "/troupe-ring-" + std::to_string(pid) + "-00000000deadbeef";
  };
  const std::string orphan = make_name(child), alive = make_name(::getpid());
  for (const auto& name : {orphan, alive}) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  auto link = collective::ShmLink::create(4096);
  REQUIRE(link.ok());
  link->unlink();
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + orphan));  // its creator is gone
  CHECK(std::filesystem::exists("/dev/shm" + alive));         // this process is not
  ::shm_unlink(alive.c_str());
}

TEST_CASE("a formed ring leaves no shared-memory names behind", "[ring][shm]") {
  const std::string mine = "troupe-ring-" + std::to_string(::getpid()) + "-";
  auto count_mine = [&] {
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
      n += e.path().filename().string().rfind(mine, 0) == 0;
    return n;
  };
  on_ranks(3, {}, [&](int, Ring& ring) {
    CHECK(ring.stats().shared_memory_links == (shm_available() ? 2 : 0));
    float x = 1.0f;
    REQUIRE(ring.all_reduce(&x, 1, Reduction::sum, "x").ok());
  });
  CHECK(count_mine() == 0);  // unlinked as soon as the neighbour answered
}

// Over TLS (TROUPE_TLS) every byte goes through OpenSSL's records: sizes that split
// records, partial non-blocking writes and reads of part of a record.
