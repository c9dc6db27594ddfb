// Checkpoint and PS snapshot files (one format): read, then taken as a PS shard's state, or
// (a delta snapshot) applied on top of one holding a dynamic table and a dense variable.
#include "actors/ps_shard_state.hpp"
#include "core/checkpoint/checkpoint.hpp"
#include "fuzz_input.hpp"
#include "fuzz_seeds.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe;
  fuzz::InputFile f(data, size);
  auto ckpt = core::read_checkpoint(f.path());
  if (!ckpt) return 0;
  if (ckpt->ints.count("delta") == 0) {
    (void)actors::PsShardState::from_snapshot(*ckpt);
    return 0;
  }
  actors::PsShardState base;
  if (!fuzz::delta_base(base).ok()) __builtin_trap();
  (void)base.apply_delta(*ckpt);
  return 0;
}
