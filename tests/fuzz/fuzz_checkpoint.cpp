// Checkpoint and PS snapshot files (one format): read, then taken as a PS shard's state.
#include "actors/ps_shard_state.hpp"
#include "core/checkpoint/checkpoint.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe;
  fuzz::InputFile f(data, size);
  auto ckpt = core::read_checkpoint(f.path());
  if (ckpt) (void)actors::PsShardState::from_snapshot(*ckpt);
  return 0;
}
