// Tensor-channel frames from a peer: requests (what a PS reads) and replies (what a worker
// reads), under the default limits.
#include "fuzz_input.hpp"
#include "net/channel.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe;
  {
    auto s = fuzz::input_socket(data, size);
    for (int i = 0; i < 4; ++i)
      if (!net::recv_request(s)) break;
  }
  {
    auto s = fuzz::input_socket(data, size);
    for (int i = 0; i < 4; ++i)
      if (!net::recv_reply(s)) break;
  }
  return 0;
}
