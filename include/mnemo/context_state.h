// State of a Context's memory: the functions of include/mnemo/state.h with the model's
// fingerprint filled in (model_fingerprint(ctx.model())). Semantics, errors and the format are
// those of state.h; docs/formats/state.md is the byte-level contract.
//
// Requantization needs no wrapper: ctx.memory().requantize(k, v) / requantize_seq(seq, k, v).
// Not thread-safe: call from the thread that drives the Context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mnemo/context.h"
#include "mnemo/state.h"

namespace mnemo {

/// Whole memory (every sequence): see the functions of the same names in state.h.
Result<size_t> state_get_size(const Context& ctx);
Result<size_t> state_get_data(const Context& ctx, std::span<uint8_t> dst);
Status state_set_data(Context& ctx, std::span<const uint8_t> src);
Status state_save_file(const Context& ctx, const std::string& path,
                       std::span<const int32_t> tokens);
Result<std::vector<int32_t>> state_load_file(Context& ctx, const std::string& path);

/// One sequence, restorable into any destination seq_id: see state.h.
Result<size_t> state_seq_get_size(const Context& ctx, SeqId seq);
Result<size_t> state_seq_get_data(const Context& ctx, SeqId seq, std::span<uint8_t> dst);
Status state_seq_set_data(Context& ctx, std::span<const uint8_t> src, SeqId dst_seq);
Status state_seq_save_file(const Context& ctx, const std::string& path, SeqId seq,
                           std::span<const int32_t> tokens);
Result<std::vector<int32_t>> state_seq_load_file(Context& ctx, const std::string& path,
                                                 SeqId dst_seq, const StateSeqCheck& check = {});

}  // namespace mnemo
