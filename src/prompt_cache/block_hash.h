// Chained block hashes of a token list: the keys of the prompt cache's index (prompt_cache.h)
// and of the block events a router can follow.
//
// A token list is cut into blocks of block_tokens tokens; only full blocks are hashed. Block i's
// hash covers its own tokens and, through its seed, every block before it:
//
//   h_-1 = root                                   (model_root_hash: one chain per model)
//   h_i  = XXH3-64(tokens[i*B .. (i+1)*B) as little-endian int32, seed = h_{i-1})
//
// so two lists share h_i exactly when they share their first (i+1)*B tokens (up to 64-bit
// collisions, which the cache guards against by comparing tokens before use). This is vLLM's
// prefix-caching scheme (hash of the parent block's hash and the block's tokens) with XXH3-64
// (Yann Collet, xxhash.com, doc/xxhash_spec.md) as the hash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mnemo/state.h"

namespace mnemo::prompt_cache {

/// The chain's root for a model: XXH3-64 (seed 0) of the fingerprint's architecture name, then
/// n_layer and every layer's K and V widths as little-endian u32, then hparams_hash as u64.
/// Entries of models with different fingerprints never share a block hash.
uint64_t model_root_hash(const ModelFingerprint& fp);

/// h_0 .. h_{k-1} of the first k = min(max_blocks, tokens.size() / block_tokens) full blocks.
/// block_tokens >= 1 (CHECKed).
std::vector<uint64_t> block_hashes(std::span<const int32_t> tokens, uint32_t block_tokens,
                                   uint64_t root, size_t max_blocks = SIZE_MAX);

/// The hash of block i given its parent's hash (the step of the chain above).
uint64_t next_block_hash(uint64_t parent, std::span<const int32_t> block);

/// An entry's identity: XXH3-64 of the whole token list (little-endian int32), seed root. Names
/// its file in the disk tier.
uint64_t entry_key(std::span<const int32_t> tokens, uint64_t root);

/// 16 lower-case hex digits.
std::string hex16(uint64_t v);

}  // namespace mnemo::prompt_cache
