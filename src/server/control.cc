// Control requests on the loop thread, between two decode steps (engine.h): each one arrives
// through the incoming queue and is answered in the same pass (run_control): snapshots for
// /slots, /props and /metrics; slot save / restore / erase; requantization. Also the KV policy
// that runs after every step (--kv-policy). Failures are mapped to an ErrorKind by
// error_kind_for (errors.h).
#include <fmt/format.h>

#include <utility>

#include "mnemo/log.h"
#include "server/engine.h"
#include "server/engine_internal.h"

namespace mnemo::server {
namespace {

ControlReply error_reply(ErrorKind kind, Status st) {
  ControlReply r;
  r.status = std::move(st);
  r.error_kind = kind;
  return r;
}

}  // namespace

void Engine::run_control(ControlRequest& req, std::promise<ControlReply>& reply) {
  ControlReply r;
  switch (req.kind) {
    case ControlKind::kSnapshot:
      r = snapshot();
      break;
    case ControlKind::kSlotSave:
      r = slot_save(req);
      break;
    case ControlKind::kSlotRestore:
      r = slot_restore(req);
      break;
    case ControlKind::kSlotErase:
      r = slot_erase(req);
      break;
    case ControlKind::kRequantize:
      r = requantize(req);
      break;
  }
  reply.set_value(std::move(r));
}

ControlReply Engine::snapshot() {
  ControlReply r;
  r.breakdown = ctx_->memory().breakdown();
  r.n_queued = static_cast<int32_t>(waiting_.size());
  r.cache = reuse_->cache_stats();
  r.store = reuse_->store_stats();
  for (auto& s : slots_) {
    if (s->state != SlotState::kIdle) ++r.n_processing;
    if (s->state == SlotState::kPreempted) ++r.n_preempted;
    r.slots.push_back(slot_info(*s));
  }
  return r;
}

std::optional<ControlReply> Engine::idle_slot_error(int32_t slot) const {
  if (slot < 0 || slot >= static_cast<int32_t>(slots_.size())) {
    return error_reply(ErrorKind::kNotFound,
                       Status::not_found(fmt::format("slot {} does not exist", slot)));
  }
  if (slots_[slot]->state != SlotState::kIdle) {
    return error_reply(ErrorKind::kBusy, Status::invalid_argument(
                                             fmt::format("slot {} is processing a request", slot)));
  }
  return std::nullopt;
}

ControlReply Engine::slot_erase(const ControlRequest& req) {
  if (auto err = idle_slot_error(req.slot)) return *err;
  Slot& s = *slots_[req.slot];
  const double t0 = now_ms();
  ControlReply r;
  r.n_tokens = static_cast<int32_t>(s.held.tokens.size());
  // The memory outlives its slot: stashed first, a later request still finds it.
  if (Status st = reuse_->drop(s.held); !st.ok()) return error_reply(ErrorKind::kInternal, st);
  r.ms = now_ms() - t0;
  return r;
}

ControlReply Engine::slot_save(const ControlRequest& req) {
  if (auto err = idle_slot_error(req.slot)) return *err;
  Slot& s = *slots_[req.slot];
  const double t0 = now_ms();
  ControlReply r;
  auto bytes = reuse_->save_file(s.held, req.path);
  if (!bytes.ok()) {
    return error_reply(error_kind_for(bytes.status(), ErrorOrigin::kSlotSave), bytes.status());
  }
  r.n_tokens = static_cast<int32_t>(s.held.tokens.size());
  r.bytes = *bytes;
  r.ms = now_ms() - t0;
  return r;
}

ControlReply Engine::slot_restore(const ControlRequest& req) {
  if (auto err = idle_slot_error(req.slot)) return *err;
  Slot& s = *slots_[req.slot];
  const double t0 = now_ms();
  auto bytes = reuse_->load_file(s.held, req.path);
  if (!bytes.ok()) {
    return error_reply(error_kind_for(bytes.status(), ErrorOrigin::kSlotRestore), bytes.status());
  }
  check_slot(s);
  ControlReply r;
  r.n_tokens = static_cast<int32_t>(s.held.tokens.size());
  r.bytes = *bytes;
  r.ms = now_ms() - t0;
  return r;
}

ControlReply Engine::requantize(const ControlRequest& req) {
  if (req.slot >= static_cast<int32_t>(slots_.size())) {
    return error_reply(ErrorKind::kNotFound,
                       Status::not_found(fmt::format("slot {} does not exist", req.slot)));
  }
  if (req.slot >= 0 && info_.kv_unified) {
    return error_reply(ErrorKind::kInvalidRequest,
                       Status::invalid_argument(
                           "per-slot requantization needs split KV (one stream per slot); this "
                           "server runs with -kvu: requantize the whole cache instead"));
  }
  Memory& mem = ctx_->memory();
  reuse_->wait_stashes();  // no sequence is being read while the memory changes
  // A type the request leaves out stays as the slot (the whole cache: slot 0) has it now. A
  // memory without K/V refuses any types (kNotSupported).
  auto ref = mem.seq_info(req.slot >= 0 ? req.slot : 0);
  if (!ref.ok()) return error_reply(ErrorKind::kInternal, ref.status());
  const double t0 = now_ms();
  ControlReply r;
  r.type_k = req.type_k.value_or(ref->k_type);
  r.type_v = req.type_v.value_or(ref->v_type);
  r.bytes_before = mem.breakdown().tensor_bytes;
  const Status st = req.slot < 0 ? mem.requantize(r.type_k, r.type_v)
                                 : mem.requantize_seq(req.slot, r.type_k, r.type_v);
  if (!st.ok()) {
    return error_reply(error_kind_for(st, ErrorOrigin::kRequantize), st);
  }
  r.bytes_after = mem.breakdown().tensor_bytes;
  r.ms = now_ms() - t0;
  metrics_->requantizations_total.fetch_add(1, std::memory_order_relaxed);
  for (auto& s : slots_) check_slot(*s);
  return r;
}

void Engine::apply_policy() {
  // The policy requantizes idle slots' sequences: not while one is being stashed (next step).
  if (!params_.kv_policy || reuse_->stashes_pending()) return;
  std::vector<uint64_t> last_active(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) last_active[i] = slots_[i]->last_active;
  auto moves = params_.kv_policy->step(ctx_->memory(), last_active);
  if (!moves.ok()) {
    MNEMO_LOG(kWarn) << "kv policy: " << moves.status().to_string();
    return;
  }
  for (const KvPolicy::Move& m : *moves) {
    metrics_->requantizations_total.fetch_add(1, std::memory_order_relaxed);
    MNEMO_LOG(kInfo) << fmt::format("kv policy: slot {} rung {} -> {} (occupancy {:.2f} -> {:.2f})",
                                    m.seq, m.from_rung, m.to_rung, m.occupancy_before,
                                    m.occupancy_after);
  }
}

}  // namespace mnemo::server
