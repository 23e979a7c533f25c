// Sequence and memory state: save what a memory holds and restore it later, into this process
// or another replica, without re-reading the prompt (docs/design.md §3.8).
//
// Two scopes, as in the field (llama.cpp's llama_state_* / llama_state_seq_* names):
//   state_*      the whole memory: every sequence, every stream;
//   state_seq_*  one sequence: its cells (positions, pending shifts, K/V rows of every layer;
//                for sliding-window models the whole window the memory actually holds), which
//                can be restored into ANY destination seq_id, replacing what that sequence held.
// and three carriers: a caller's buffer (get_size / get_data / set_data), a file (save_file /
// load_file, which also carry the caller's token list), or any StateSink / StateSource
// (state_write / state_read; include/mnemo/state_io.h).
//
// The bytes are the format of docs/formats/state.md (constants: include/mnemo/state_format.h):
// magic, version, a header with the model fingerprint and the memory kind, the memory's parts
// (per stream block: cell records, then one section per layer with K and V rows in their stored
// type), the token list, an end marker; XXH3-64 checksum per section.
//
// Restore is flexible:
//   - into a unified or a split cache, whichever wrote it (a shared cell of a unified state is
//     copied into each of its sequences' streams when restored into a split cache);
//   - into another seq_id, and into a smaller or larger n_ctx when the cells fit;
//   - into a cache whose K/V types or rotation differ: rows are converted (dequantize, un-rotate /
//     rotate, quantize) between any pair of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl.
// and safe: restore reads the state twice. Pass 1 validates everything (structure, checksums,
// fingerprint, layers, types, positions, seq ids, room at the destination) and changes nothing;
// pass 2 applies. Between the two, a sequence restore from a file asks the caller's StateSeqCheck
// (the token list and the positions pass 1 found): the server refuses there a file whose tokens
// disagree with its cells or leave the vocabulary. Every error of pass 1 or of the check (wrong model, newer version, truncation, damaged bytes,
// no room, missing file, ...) leaves the memory byte-equal to before. Pass 2 can fail only if the
// source changed between the passes (a file rewritten meanwhile); the destination sequence (for
// a whole-memory restore: the memory) is then left empty and the error says so.
//
// Memory: writers and readers stream, so extra memory is O(cells of the state) for the cell
// records and placement plan (a few bytes per cell) plus one read buffer of at most ~1 MiB, never
// a second copy of the K/V data. Threading: none of these functions is thread-safe with respect
// to the memory (the server loop owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "mnemo/batch.h"
#include "mnemo/memory.h"
#include "mnemo/state_format.h"
#include "mnemo/state_io.h"
#include "mnemo/status.h"

namespace mnemo {

/// What identifies the model a state belongs to (HEAD of the format). A restore compares every
/// field and refuses a state of another model, naming the first difference. Computed from a
/// loaded model by model_fingerprint() (include/mnemo/model_fingerprint.h); tests of the memory
/// alone build one by hand.
struct ModelFingerprint {
  std::string arch;                    // general.architecture: "llama", "gemma3", ...
  std::vector<uint32_t> n_embd_k_gqa;  // [n_layer] K row width (elements) of every model layer
  std::vector<uint32_t> n_embd_v_gqa;  // [n_layer] V row width
  uint64_t hparams_hash = 0;           // XXH3-64 of the hyper-parameters and tensor shapes
                                       // (docs/formats/state.md, "Model fingerprint")

  uint32_t n_layer() const { return static_cast<uint32_t>(n_embd_k_gqa.size()); }
  bool operator==(const ModelFingerprint&) const = default;
};

/// A state's header, read without touching any memory (state_inspect).
struct StateInfo {
  uint32_t version = 0;
  state_format::Scope scope = state_format::Scope::kWhole;
  SeqId seq = -1;  // kSequence: the seq_id it was saved from
  state_format::MemoryKindId memory_kind = state_format::MemoryKindId::kNone;
  ModelFingerprint model;
  uint64_t bytes = 0;  // total size of the state
};

// ---------------------------------------------------------------------------------------------
// Whole memory

/// Exact size in bytes of state_get_data's output now (no token list). Cost: O(metadata).
/// Errors: kNotSupported for a memory that cannot save its state.
Result<size_t> state_get_size(const Memory& mem, const ModelFingerprint& fp);
/// Writes the whole memory's state into dst; returns the bytes written. Errors: kNoSpace when dst
/// is smaller than state_get_size(), kNotSupported as above.
Result<size_t> state_get_data(const Memory& mem, const ModelFingerprint& fp,
                              std::span<uint8_t> dst);
/// Replaces the whole memory with a state from state_get_data / state_save_file. Errors (memory
/// unchanged): kCorruption (not a state, truncated, damaged: names section and offset),
/// kNotSupported (newer format version; memory kind mismatch), kInvalidArgument (another model:
/// names the differing field; a sequence state: use state_seq_set_data; a seq_id this memory
/// cannot hold), kNoSpace (the cells do not fit a stream).
Status state_set_data(Memory& mem, const ModelFingerprint& fp, std::span<const uint8_t> src);
/// state_get_data into a file plus the caller's tokens, written atomically (a temporary file
/// renamed into place). Errors: kIOError naming the path.
Status state_save_file(const Memory& mem, const ModelFingerprint& fp, const std::string& path,
                       std::span<const int32_t> tokens);
/// state_set_data from a file; returns the token list saved with it. Errors as state_set_data,
/// plus kNotFound for a missing file (the memory is untouched) and kIOError.
Result<std::vector<int32_t>> state_load_file(Memory& mem, const ModelFingerprint& fp,
                                             const std::string& path);

// ---------------------------------------------------------------------------------------------
// One sequence

/// Exact size of state_seq_get_data's output for seq now. Errors: kInvalidArgument for seq
/// outside [0, n_seq_max), kNotSupported for a memory that cannot save its state.
Result<size_t> state_seq_get_size(const Memory& mem, const ModelFingerprint& fp, SeqId seq);
/// Writes sequence seq's state (an empty sequence gives a valid state of zero cells). Errors as
/// state_seq_get_size, plus kNoSpace for a too-small dst.
Result<size_t> state_seq_get_data(const Memory& mem, const ModelFingerprint& fp, SeqId seq,
                                  std::span<uint8_t> dst);
/// Restores a sequence state into dst_seq (any seq_id), replacing what dst_seq held; other
/// sequences are untouched. Errors as state_set_data (kInvalidArgument for a whole-memory state
/// or dst_seq out of range; kNoSpace naming the cells needed and free); memory unchanged.
Status state_seq_set_data(Memory& mem, const ModelFingerprint& fp, std::span<const uint8_t> src,
                          SeqId dst_seq);
/// state_seq_get_data plus the caller's token list of that sequence, into a file (atomic).
Status state_seq_save_file(const Memory& mem, const ModelFingerprint& fp, const std::string& path,
                           SeqId seq, std::span<const int32_t> tokens);
/// A caller's last word on a sequence state, asked after the validation pass and before anything
/// changes: the state's token list and the positions it would give the sequence. A non-OK
/// answer is the restore's error, and the memory is unchanged.
using StateSeqCheck =
    std::function<Status(std::span<const int32_t> tokens, const StateSeqSummary& summary)>;

/// state_seq_set_data from a file into dst_seq; returns the saved token list. `check`, when
/// given, runs between the two passes (StateSeqCheck).
Result<std::vector<int32_t>> state_seq_load_file(Memory& mem, const ModelFingerprint& fp,
                                                 const std::string& path, SeqId dst_seq,
                                                 const StateSeqCheck& check = {});

// ---------------------------------------------------------------------------------------------
// Streaming building blocks (the functions above are thin wrappers)

/// Writes a complete state (header, HEAD, the memory's parts, TOKN, DONE) to `sink`.
Status state_write(const Memory& mem, const ModelFingerprint& fp, StateSink* sink,
                   const StateWriteSpec& spec, std::span<const int32_t> tokens);
/// Validates then applies a complete state from `source` (two passes; see the header comment).
/// scope must match the state's; dst_seq is used for kSequence. Returns the token list.
/// `check` (kSequence only) runs between the passes: see StateSeqCheck.
Result<std::vector<int32_t>> state_read(Memory& mem, const ModelFingerprint& fp,
                                        StateSource* source, state_format::Scope scope,
                                        SeqId dst_seq, const StateSeqCheck& check = {});
/// Reads the file header and HEAD only. Errors as for a restore's header checks.
Result<StateInfo> state_inspect(StateSource* source);
/// Reads the file header, HEAD and the token list (TOKN) of a state without reading its memory
/// parts: the sections between HEAD and TOKN are stepped over by their declared lengths (two
/// small reads each, whatever their size; their checksums are not verified here), TOKN's
/// checksum is, and DONE must end the state. For an index of state files (the prompt cache's
/// disk tier). Errors: as state_inspect, plus kCorruption for a missing or damaged TOKN.
Result<StateInfo> state_inspect_tokens(StateSource* source, std::vector<int32_t>* tokens);
/// Verifies a state's framing and every section's checksum, without a memory or a model: what
/// `mnemo cache verify` does. Cost: one read of the whole state. Errors: as state_inspect, plus
/// kCorruption naming the first damaged section and its offset.
Status state_verify(StateSource* source);

}  // namespace mnemo
