// SwaKvCache state and requantization: both children, in the order base then swa (contracts in
// memory.h and swa_kv_cache.h; byte layout in docs/formats/state.md).
#include "memory/swa_kv_cache.h"
#include "mnemo/state_io.h"

namespace mnemo {

namespace sf = state_format;

Status SwaKvCache::state_write(StateWriter& w, const StateWriteSpec& spec) const {
  MNEMO_RETURN_IF_ERROR(base_->state_write_part(w, spec, sf::PartRole::kKvBase));
  return swa_->state_write_part(w, spec, sf::PartRole::kKvSwa);
}

Status SwaKvCache::state_read(StateReader& r, const StateReadSpec& spec) {
  // Dry run: both parts validate before state.cc lets either apply. Apply: if the swa part fails
  // (a source changed between the passes) the base part was applied already: empty it too.
  MNEMO_RETURN_IF_ERROR(base_->state_read_part(r, spec, sf::PartRole::kKvBase));
  return composite::empty_if_apply_failed(swa_->state_read_part(r, spec, sf::PartRole::kKvSwa),
                                          spec, *base_);
}

Status SwaKvCache::requantize(GgmlType k_type, GgmlType v_type) {
  MNEMO_RETURN_IF_ERROR(base_->check_requantize(k_type, v_type));
  MNEMO_RETURN_IF_ERROR(
      swa_->check_requantize(k_type, v_type).with_context("sliding-window layers"));
  // Both children's new mappings are made before either changes: all or nothing.
  MNEMO_ASSIGN_OR_RETURN(KvCache::PreparedRequantize base,
                         base_->prepare_requantize(k_type, v_type));
  auto swa = swa_->prepare_requantize(k_type, v_type);
  if (!swa.ok()) return swa.status().with_context("sliding-window layers");
  base_->commit_requantize(std::move(base));
  swa_->commit_requantize(std::move(*swa));
  config_.kv.k_type = k_type;
  config_.kv.v_type = v_type;
  return Status();
}

Status SwaKvCache::requantize_seq(SeqId seq, GgmlType k_type, GgmlType v_type) {
  MNEMO_RETURN_IF_ERROR(base_->check_requantize_seq(seq, k_type, v_type));
  MNEMO_RETURN_IF_ERROR(
      swa_->check_requantize_seq(seq, k_type, v_type).with_context("sliding-window layers"));
  MNEMO_RETURN_IF_ERROR(base_->requantize_seq(seq, k_type, v_type));
  return swa_->requantize_seq(seq, k_type, v_type);
}

}  // namespace mnemo
