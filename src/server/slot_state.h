// The server's use of the sequence-state API (include/mnemo/context_state.h, format in
// docs/formats/state.md) and of requantization (Memory::requantize / requantize_seq), behind three
// calls so the loop does not depend on their exact shape.
// Called by the loop thread only, between decode steps.
#pragma once

#include <string>
#include <vector>

#include "mnemo/context.h"
#include "mnemo/quant.h"
#include "mnemo/status.h"
#include "mnemo/tokenizer.h"

namespace mnemo::server {

/// Writes sequence `seq` of the context's memory and `tokens` (what it holds, position order)
/// to `path` (atomically: a temporary file renamed into place). Returns the bytes written.
/// Errors: IOError naming the path; the memory is never changed.
Result<size_t> save_slot_file(Context& ctx, SeqId seq, const std::string& path,
                              const std::vector<TokenId>& tokens);

/// Replaces sequence `seq` with the state in `path` and sets *tokens to its token list. Returns
/// the bytes read. Errors: NotFound (no such file), Corruption / InvalidArgument / NotSupported
/// (a bad, damaged, newer or other model's file), NoSpace; on those the memory and *tokens are
/// unchanged. A file whose token list does not match its cells' positions 0..n-1 is
/// InvalidArgument after the restore: the sequence is then emptied.
Result<size_t> load_slot_file(Context& ctx, SeqId seq, const std::string& path,
                              std::vector<TokenId>* tokens);

/// Converts the K/V of sequence `seq`'s stream (split mode), or of the whole cache when seq < 0,
/// to the given types without re-processing any token (old buffers are released). Errors:
/// InvalidArgument (an unsupported type; seq >= 0 in a unified cache), NoSpace; the memory is
/// unchanged on error.
Status requantize_memory(Context& ctx, SeqId seq, GgmlType type_k, GgmlType type_v);

}  // namespace mnemo::server
