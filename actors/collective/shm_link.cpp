#include "actors/collective/shm_link.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

namespace troupe::collective {

using core::Errc;
using core::make_error;

namespace {

constexpr uint32_t header_magic = 0x31485254;  // "TRH1"
constexpr size_t header_bytes = 4096;          // the data starts on the next page
// At most this much per write or read: the consumer starts on a piece while the producer
// copies the next one.
constexpr size_t piece_bytes = size_t{256} << 10;

std::string errno_text() {
  return std::strerror(errno);
}

// A process killed between creating its segment and its neighbour taking it leaves the
// name behind (the whole link's size of /dev/shm). The names carry the creator's pid: the
// next link made on this host removes those whose creator no longer exists. (A creator in
// another pid namespace sharing /dev/shm looks gone too; its neighbour then fails to open
// the segment and that link stays on TCP.)
void remove_orphans() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/dev/shm", ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int pid = 0;
    if (std::sscanf(name.c_str(), "troupe-ring-%d-", &pid) != 1 || pid <= 0) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    ::shm_unlink(("/" + name).c_str());
  }
}

}  // namespace

// The counters only grow (they count bytes since the link was made); each sits on its own
// cache line so that producer and consumer do not share one.
struct ShmLink::Header {
  uint32_t magic;
  uint32_t reserved;
  uint64_t nonce;
  uint64_t capacity;
  alignas(64) std::atomic<uint64_t> written;
  alignas(64) std::atomic<uint64_t> read;
};
static_assert(sizeof(ShmLink::Offer) == 64, "packed by layout");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared between processes");

core::Expected<ShmLink> ShmLink::create(size_t capacity) {
  if (capacity == 0 || capacity % 4096 != 0)
    return make_error(Errc::invalid_argument,
                      "shared-memory link of " + std::to_string(capacity) + " bytes");
  remove_orphans();
  std::random_device rd;
  const uint64_t nonce = (uint64_t{rd()} << 32) ^ rd();
  char name[40];
  std::snprintf(name, sizeof name, "/troupe-ring-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(nonce));
  const int fd = ::shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return make_error(Errc::unavailable, std::string("shm_open ") + name + ": " + errno_text());
  const size_t bytes = header_bytes + capacity;
  // Reserved now, not at first touch: a full /dev/shm must be an error here, not a SIGBUS
  // in the middle of a collective.
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      (errno = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes))) != 0) {
    const auto e = make_error(Errc::unavailable, "reserving " + std::to_string(bytes) +
                                                     " bytes for " + name + ": " + errno_text());
    ::close(fd);
    ::shm_unlink(name);
    return e;
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name);
    return make_error(Errc::unavailable, std::string("mmap ") + name + ": " + errno_text());
  }
  ShmLink link;
  link.header_ = new (base) Header{header_magic, 0, nonce, capacity, {0}, {0}};
  link.data_ = static_cast<char*>(base) + header_bytes;
  link.capacity_ = capacity;
  link.mapped_ = bytes;
  link.name_ = name;
  link.owner_ = true;
  return link;
}

core::Expected<ShmLink> ShmLink::open(const Offer& offer) {
  std::string name(offer.name, strnlen(offer.name, sizeof offer.name));
  if (offer.magic != offer_magic || name.empty() || offer.capacity == 0 ||
      offer.capacity % 4096 != 0)
    return make_error(Errc::invalid_argument, "no usable shared-memory offer");
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return make_error(Errc::unavailable, "shm_open " + name + ": " + errno_text());
  const size_t bytes = header_bytes + offer.capacity;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    return make_error(Errc::unavailable, "shared-memory segment " + name + " has another size");
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED)
    return make_error(Errc::unavailable, "mmap " + name + ": " + errno_text());
  ShmLink link;
  link.header_ = static_cast<Header*>(base);
  link.data_ = static_cast<char*>(base) + header_bytes;
  link.capacity_ = offer.capacity;
  link.mapped_ = bytes;
  link.name_ = name;
  if (link.header_->magic != header_magic || link.header_->nonce != offer.nonce ||
      link.header_->capacity != offer.capacity)
    return make_error(Errc::unavailable,
                      "shared-memory segment " + name + " is not the one offered (another host?)");
  return link;
}

ShmLink::ShmLink(ShmLink&& o) noexcept {
  *this = std::move(o);
}

ShmLink& ShmLink::operator=(ShmLink&& o) noexcept {
  if (this != &o) {
    reset();
    header_ = std::exchange(o.header_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
    name_ = std::move(o.name_);
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

ShmLink::~ShmLink() {
  reset();
}

void ShmLink::reset() {
  unlink();
  if (header_) ::munmap(header_, mapped_);
  header_ = nullptr;
  data_ = nullptr;
}

ShmLink::Offer ShmLink::offer() const {
  Offer o;
  if (!header_) return o;
  o.magic = offer_magic;
  o.nonce = header_->nonce;
  o.capacity = capacity_;
  std::memcpy(o.name, name_.data(), std::min(name_.size(), sizeof o.name - 1));
  return o;
}

void ShmLink::unlink() {
  if (owner_) ::shm_unlink(name_.c_str());
  owner_ = false;
}

size_t ShmLink::write(const char* src, size_t n) {
  const uint64_t w = header_->written.load(std::memory_order_relaxed);  // ours alone
  const uint64_t r = header_->read.load(std::memory_order_acquire);
  const size_t at = static_cast<size_t>(w % capacity_);
  const size_t m =
      std::min({n, capacity_ - static_cast<size_t>(w - r), capacity_ - at, piece_bytes});
  if (m == 0) return 0;
  std::memcpy(data_ + at, src, m);
  header_->written.store(w + m, std::memory_order_release);
  return m;
}

const char* ShmLink::peek(size_t n, size_t* m) const {
  const uint64_t w = header_->written.load(std::memory_order_acquire);
  const uint64_t r = header_->read.load(std::memory_order_relaxed);  // ours alone
  const size_t at = static_cast<size_t>(r % capacity_);
  *m = std::min({n, static_cast<size_t>(w - r), capacity_ - at, piece_bytes});
  return data_ + at;
}

void ShmLink::consume(size_t m) {
  header_->read.store(header_->read.load(std::memory_order_relaxed) + m, std::memory_order_release);
}

}  // namespace troupe::collective
