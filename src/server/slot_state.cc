#include "server/slot_state.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <span>

#include "mnemo/context_state.h"

namespace mnemo::server {
namespace {

Result<size_t> file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Status::io_error("cannot stat '" + path.substr(path.find_last_of('/') + 1) + "'");
  }
  return static_cast<size_t>(st.st_size);
}

}  // namespace

namespace {

// A slot holds its tokens at positions 0..n-1: a file whose token list disagrees with its cells,
// or holds an id outside the vocabulary (written by another program, or edited), cannot be
// continued correctly. `name` is the file's name as the client gave it.
Status check_slot_tokens(std::span<const int32_t> tokens, Pos p0, Pos p1, uint32_t n_vocab,
                         const std::string& name) {
  const Pos n = static_cast<Pos>(tokens.size());
  const bool ok = n == 0 ? p1 < 0 : (p0 == 0 && p1 == n - 1);
  if (!ok) {
    return Status::invalid_argument(
        fmt::format("'{}' holds {} tokens but cells at positions [{}, {}]; a slot needs "
                    "positions 0..{}",
                    name, n, p0, p1, n - 1));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab) {
      return Status::invalid_argument(
          fmt::format("'{}' holds token id {} at position {}; the vocabulary has {} tokens", name,
                      tokens[i], i, n_vocab));
    }
  }
  return Status();
}

// The error with the slot directory taken out of its message (a client names files, not paths).
Status without_dir(const Status& st, const std::string& path, const std::string& name) {
  std::string m = st.message();
  for (size_t at = m.find(path); at != std::string::npos; at = m.find(path, at + name.size())) {
    m.replace(at, path.size(), name);
  }
  return Status(st.code(), m);
}

}  // namespace

Result<size_t> save_slot_file(Context& ctx, SeqId seq, const std::string& path,
                              const std::vector<TokenId>& tokens) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  if (Status st = state_seq_save_file(ctx, path, seq, tokens); !st.ok()) {
    return without_dir(st, path, name);
  }
  return file_size(path);
}

Result<size_t> load_slot_file(Context& ctx, SeqId seq, const std::string& path,
                              std::vector<TokenId>* tokens) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  const uint32_t n_vocab = ctx.model().hparams().n_vocab;
  // Checked between the validation pass and the apply: a file that fails changes nothing.
  auto check = [&](std::span<const int32_t> t, const StateSeqSummary& s) {
    return s.set ? check_slot_tokens(t, s.pos_min, s.pos_max, n_vocab, name) : Status();
  };
  auto r = state_seq_load_file(ctx, path, seq, check);
  if (!r.ok()) return without_dir(r.status(), path, name);
  // The memory's answer after the apply, for a memory whose parts report no positions.
  const Memory& mem = ctx.memory();
  if (Status st = check_slot_tokens(*r, mem.seq_pos_min(seq), mem.seq_pos_max(seq), n_vocab, name);
      !st.ok()) {
    (void)ctx.memory().seq_rm(seq, -1, -1);
    return Status(st.code(), st.message() + " (the slot was cleared)");
  }
  *tokens = std::move(r).value();
  return file_size(path);
}

Status requantize_memory(Context& ctx, SeqId seq, GgmlType type_k, GgmlType type_v) {
  return seq < 0 ? ctx.memory().requantize(type_k, type_v)
                 : ctx.memory().requantize_seq(seq, type_k, type_v);
}

}  // namespace mnemo::server
