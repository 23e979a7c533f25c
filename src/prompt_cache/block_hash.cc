#include "prompt_cache/block_hash.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>

#include "mnemo/check.h"

namespace mnemo::prompt_cache {

// Token ids are hashed as they lie in memory: int32 little-endian on every target mnemo builds
// for (x86-64).
static_assert(sizeof(int32_t) == 4);

uint64_t model_root_hash(const ModelFingerprint& fp) {
  std::vector<uint8_t> b(fp.arch.begin(), fp.arch.end());
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  u32(fp.n_layer());
  for (uint32_t il = 0; il < fp.n_layer(); ++il) {
    u32(fp.n_embd_k_gqa[il]);
    u32(fp.n_embd_v_gqa[il]);
  }
  u32(static_cast<uint32_t>(fp.hparams_hash));
  u32(static_cast<uint32_t>(fp.hparams_hash >> 32));
  return XXH3_64bits(b.data(), b.size());
}

uint64_t next_block_hash(uint64_t parent, std::span<const int32_t> block) {
  return XXH3_64bits_withSeed(block.data(), block.size_bytes(), parent);
}

std::vector<uint64_t> block_hashes(std::span<const int32_t> tokens, uint32_t block_tokens,
                                   uint64_t root, size_t max_blocks) {
  CHECK(block_tokens >= 1);
  const size_t n = std::min(max_blocks, tokens.size() / block_tokens);
  std::vector<uint64_t> h(n);
  uint64_t parent = root;
  for (size_t i = 0; i < n; ++i) {
    parent = next_block_hash(parent, tokens.subspan(i * block_tokens, block_tokens));
    h[i] = parent;
  }
  return h;
}

uint64_t entry_key(std::span<const int32_t> tokens, uint64_t root) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), root);
}

std::string hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace mnemo::prompt_cache
