// The membership handshake's two sides (plain and TLS) against whatever a peer sends, and the
// gate's BASP frame check over the same bytes.
#include <chrono>

#include "fuzz_input.hpp"
#include "net/auth.hpp"
#include "net/gate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe;
  {
    auto s = fuzz::input_socket(data, size);
    (void)net::authenticate_peer(s, "the job's secret, 32 bytes long!",
                                 std::chrono::milliseconds(5));
  }
  {
    auto s = fuzz::input_socket(data, size);
    (void)net::authenticate_to(s, "the job's secret, 32 bytes long!", std::chrono::milliseconds(5));
  }
  {  // the TLS side of both (TRS1): the magic, the mismatch answers
    auto s = fuzz::input_socket(data, size);
    (void)net::authenticate_peer(s, "the job's secret, 32 bytes long!",
                                 std::chrono::milliseconds(5), /*tls=*/true);
    auto c = fuzz::input_socket(data, size);
    (void)net::authenticate_to(c, "the job's secret, 32 bytes long!", std::chrono::milliseconds(5),
                               /*tls=*/true);
  }
  // The frame check, fed in pieces whose sizes come from the input's first byte.
  net::BaspFrameCheck check(1 << 20);
  const size_t step = size > 0 ? 1 + data[0] % 64 : 1;
  for (size_t off = 0; off < size; off += step)
    if (!check.feed(data + off, std::min(step, size - off))) break;
  return 0;
}
