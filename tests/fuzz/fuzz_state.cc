// libFuzzer target for the state reader (docs/formats/state.md): arbitrary bytes are restored
// into a KV cache (as one sequence into seq_id 1, and as a whole memory) and into a
// sliding-window cache. A refused input must leave the memory byte-equal to before (cells, K/V
// rows of occupied cells, stream types); an accepted one must leave it consistent, and saving
// it again and restoring that into a fresh copy must give the same bytes. Invariants are checked
// with abort(). Seed corpus: tests/fuzz/corpus/state/ (written by StateTest.FuzzCorpusIsValid).
// Run: scripts/fuzz [SECONDS].
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "mnemo/state.h"
#include "support/state_test_util.h"

namespace {

using namespace mnemo;

void require(bool cond) {
  if (!cond) std::abort();
}

// Restores `in` into `mem` with `restore`; checks the invariants above.
template <typename Mem, typename Restore, typename Save>
void one(Mem& mem, std::span<const uint8_t> in, Restore restore, Save save) {
  const std::string before = testing::full_snapshot(mem);
  const Status st = restore(mem, in);
  if (!st.ok()) {
    require(!st.message().empty());
    require(testing::full_snapshot(mem) == before);
    return;
  }
  std::vector<uint8_t> again = save(mem);
  testing::FuzzMemories fresh = testing::make_fuzz_memories();
  Mem& other = [&]() -> Mem& {
    if constexpr (std::is_same_v<Mem, KvCache>)
      return *fresh.kv;
    else
      return *fresh.swa;
  }();
  require(restore(other, again).ok());
  require(save(other) == again);
}

std::vector<uint8_t> save_whole(const Memory& m) {
  std::vector<uint8_t> out(*state_get_size(m, testing::test_fingerprint()));
  require(state_get_data(m, testing::test_fingerprint(), out).ok());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  const ModelFingerprint fp = testing::test_fingerprint();
  testing::FuzzMemories m = testing::make_fuzz_memories();
  auto seq_restore = [&](auto& mem, std::span<const uint8_t> b) {
    return state_seq_set_data(mem, fp, b, 1);
  };
  auto seq_save = [&](const auto& mem) {
    std::vector<uint8_t> out(*state_seq_get_size(mem, fp, 1));
    require(state_seq_get_data(mem, fp, 1, out).ok());
    return out;
  };
  auto whole_restore = [&](auto& mem, std::span<const uint8_t> b) {
    return state_set_data(mem, fp, b);
  };
  auto whole_save = [&](const auto& mem) { return save_whole(mem); };
  one(*m.kv, in, seq_restore, seq_save);
  one(*m.kv, in, whole_restore, whole_save);
  one(*m.swa, in, seq_restore, seq_save);
  one(*m.swa, in, whole_restore, whole_save);
  require(testing::check_consistent(*m.kv).empty());
  require(testing::check_consistent(m.swa->base()).empty());
  require(testing::check_consistent(m.swa->swa()).empty());
  return 0;
}
