#include "server/slot_state.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include "mnemo/context_state.h"

namespace mnemo::server {
namespace {

Result<size_t> file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::io_error("cannot stat '" + path + "'");
  return static_cast<size_t>(st.st_size);
}

}  // namespace

Result<size_t> save_slot_file(Context& ctx, SeqId seq, const std::string& path,
                              const std::vector<TokenId>& tokens) {
  MNEMO_RETURN_IF_ERROR(state_seq_save_file(ctx, path, seq, tokens));
  return file_size(path);
}

Result<size_t> load_slot_file(Context& ctx, SeqId seq, const std::string& path,
                              std::vector<TokenId>* tokens) {
  auto r = state_seq_load_file(ctx, path, seq);
  if (!r.ok()) return r.status();
  // A slot holds its tokens at positions 0..n-1; a file whose token list disagrees with its cells
  // (written by another program, or edited) cannot be continued correctly: drop it.
  const Memory& mem = ctx.memory();
  const Pos n = static_cast<Pos>(r->size());
  const Pos p0 = mem.seq_pos_min(seq), p1 = mem.seq_pos_max(seq);
  const bool ok = n == 0 ? p1 < 0 : (p0 == 0 && p1 == n - 1);
  if (!ok) {
    (void)ctx.memory().seq_rm(seq, -1, -1);
    return Status::invalid_argument(fmt::format(
        "'{}' holds {} tokens but cells at positions [{}, {}]; a slot needs positions 0..{} "
        "(the slot was cleared)",
        path, n, p0, p1, n - 1));
  }
  *tokens = std::move(r).value();
  return file_size(path);
}

Status requantize_memory(Context& ctx, SeqId seq, GgmlType type_k, GgmlType type_v) {
  return seq < 0 ? ctx.memory().requantize(type_k, type_v)
                 : ctx.memory().requantize_seq(seq, type_k, type_v);
}

}  // namespace mnemo::server
