// Test helpers for recurrent memory (linked into tests only): a fake recurrent "model" that folds
// every token into every word of a layer's states, its independent reference, and byte
// snapshots of a RecurrentMemory / HybridMemory.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "memory/hybrid_memory.h"
#include "memory/recurrent_memory.h"
#include "mnemo/batch.h"
#include "mnemo/memory.h"
#include "mnemo/status.h"

namespace mnemo::testing {

/// One step of the fake recurrence on one state word (a uint32 bit pattern): depends on the
/// word's previous value, the token, the layer, which state ('R' conv / 'S' ssm) and the word
/// index, so states of different sequences, layers or token orders differ.
uint32_t fake_rs_step(uint32_t word, int32_t token, uint32_t il, char kind, uint32_t j);

/// The fake forward pass: for the current ubatch of `ctx` (after apply()), folds its tokens, in
/// order, into the conv and ssm states of every recurrent layer in [0, n_layer).
void fake_rs_forward(const MemoryContext& ctx, uint32_t n_layer);

/// Decodes b into m (init_batch(b, n_ubatch)) with both fake models over layers [0, n_layer):
/// after each ubatch's apply(), the K/V pattern of `generation` (write_fake_kv, memory_testing.h)
/// and the fake recurrence (fake_rs_forward); each writes only what the memory holds. OK, or what
/// stopped it: the batch's refusal (kInvalidArgument with the context's message; nothing
/// changed) or apply()'s error.
Status decode_fake(Memory& m, const Batch& b, uint32_t n_ubatch, uint32_t n_layer,
                   uint64_t generation);

/// The reference: the whole-state floats (RecurrentMemory::cell layout) of a sequence that read
/// `tokens` from the zero state, computed from the token list alone.
std::vector<float> ref_rs_state(const RecurrentMemory& m, const std::vector<int32_t>& tokens,
                                uint32_t n_layer);

/// Everything observable about a recurrent state, as bytes: per sequence pos_min, pos_max,
/// checkpoint positions, the cell bytes of non-empty sequences and the bytes of every live
/// checkpoint. Equal snapshots = equal memories.
std::string snapshot(const RecurrentMemory& m);
/// Both children of a hybrid memory (KV snapshot of memory_testing.h + the recurrent one).
std::string snapshot(const HybridMemory& m);
/// The speculative states of every sequence (not in snapshot(): a rolled-back transaction may
/// drop some of them): {(seq, pos) -> state bytes}.
std::map<std::pair<SeqId, Pos>, std::string> spec_snapshot(const RecurrentMemory& m);

}  // namespace mnemo::testing
