// Context wrappers of the state API (include/mnemo/context_state.h).
#include "mnemo/context_state.h"

#include "mnemo/model_fingerprint.h"

namespace mnemo {

Result<size_t> state_get_size(const Context& ctx) {
  return state_get_size(ctx.memory(), model_fingerprint(ctx.model()));
}

Result<size_t> state_get_data(const Context& ctx, std::span<uint8_t> dst) {
  return state_get_data(ctx.memory(), model_fingerprint(ctx.model()), dst);
}

Status state_set_data(Context& ctx, std::span<const uint8_t> src) {
  return state_set_data(ctx.memory(), model_fingerprint(ctx.model()), src);
}

Status state_save_file(const Context& ctx, const std::string& path,
                       std::span<const int32_t> tokens) {
  return state_save_file(ctx.memory(), model_fingerprint(ctx.model()), path, tokens);
}

Result<std::vector<int32_t>> state_load_file(Context& ctx, const std::string& path) {
  return state_load_file(ctx.memory(), model_fingerprint(ctx.model()), path);
}

Result<size_t> state_seq_get_size(const Context& ctx, SeqId seq) {
  return state_seq_get_size(ctx.memory(), model_fingerprint(ctx.model()), seq);
}

Result<size_t> state_seq_get_data(const Context& ctx, SeqId seq, std::span<uint8_t> dst) {
  return state_seq_get_data(ctx.memory(), model_fingerprint(ctx.model()), seq, dst);
}

Status state_seq_set_data(Context& ctx, std::span<const uint8_t> src, SeqId dst_seq) {
  return state_seq_set_data(ctx.memory(), model_fingerprint(ctx.model()), src, dst_seq);
}

Status state_seq_save_file(const Context& ctx, const std::string& path, SeqId seq,
                           std::span<const int32_t> tokens) {
  return state_seq_save_file(ctx.memory(), model_fingerprint(ctx.model()), path, seq, tokens);
}

Result<std::vector<int32_t>> state_seq_load_file(Context& ctx, const std::string& path,
                                                 SeqId dst_seq, const StateSeqCheck& check) {
  return state_seq_load_file(ctx.memory(), model_fingerprint(ctx.model()), path, dst_seq, check);
}

}  // namespace mnemo
