// HybridMemory state save / restore and requantization: the attention child's part (KVPT role kv
// ..., kv_cache_io.cc) then the recurrent child's (RSPT ..., recurrent_memory_io.cc). Contracts in
// memory.h and hybrid_memory.h; bytes in docs/formats/state_recurrent.md.
#include "memory/hybrid_memory.h"
#include "mnemo/state_io.h"

namespace mnemo {

namespace sf = state_format;

Status HybridMemory::state_write(StateWriter& w, const StateWriteSpec& spec) const {
  MNEMO_RETURN_IF_ERROR(kv_->state_write_part(w, spec, sf::PartRole::kKv));
  return rs_->state_write(w, spec);
}

Status HybridMemory::state_read(StateReader& r, const StateReadSpec& spec) {
  // Dry run: both parts validate before state.cc lets either apply. Apply: if the recurrent part
  // fails (the source changed between the passes) the KV part was applied already: empty it too.
  MNEMO_RETURN_IF_ERROR(kv_->state_read_part(r, spec, sf::PartRole::kKv));
  return composite::empty_if_apply_failed(rs_->state_read(r, spec), spec, *kv_);
}

Status HybridMemory::requantize(GgmlType k_type, GgmlType v_type) {
  return kv_->requantize(k_type, v_type);
}

Status HybridMemory::requantize_seq(SeqId seq, GgmlType k_type, GgmlType v_type) {
  return kv_->requantize_seq(seq, k_type, v_type);
}

}  // namespace mnemo
