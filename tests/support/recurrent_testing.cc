#include "support/recurrent_testing.h"

#include <cstring>

#include "support/memory_testing.h"

namespace mnemo::testing {

uint32_t fake_rs_step(uint32_t word, int32_t token, uint32_t il, char kind, uint32_t j) {
  uint32_t h = word ^ (static_cast<uint32_t>(token) * 0x9E3779B1u + il * 0x85EBCA77u +
                       static_cast<uint32_t>(kind) * 0x27D4EB2Fu + j * 0xC2B2AE3Du);
  h *= 0x165667B1u;
  h ^= h >> 15;
  return h;
}

namespace {

void fold(float* state, uint32_t n, int32_t token, uint32_t il, char kind) {
  for (uint32_t j = 0; j < n; ++j) {
    uint32_t w;
    std::memcpy(&w, state + j, 4);
    w = fake_rs_step(w, token, il, kind, j);
    std::memcpy(state + j, &w, 4);
  }
}

}  // namespace

void fake_rs_forward(const MemoryContext& ctx, uint32_t n_layer) {
  const Ubatch& ub = ctx.ubatch();
  for (uint32_t il = 0; il < n_layer; ++il) {
    const RecurrentMemoryContext* rs = ctx.rs_for_layer(il);
    if (rs == nullptr) continue;
    for (uint32_t r = 0; r < ub.n_tokens(); ++r) {
      fold(rs->conv_state(il), rs->state().n_embd_r(il), ub.token[r], il, 'R');
      fold(rs->ssm_state(il), rs->state().n_embd_s(il), ub.token[r], il, 'S');
    }
  }
}

std::vector<float> ref_rs_state(const RecurrentMemory& m, const std::vector<int32_t>& tokens,
                                uint32_t n_layer) {
  std::vector<float> out;
  for (uint32_t il = 0; il < n_layer; ++il) {
    if (!m.holds_layer(il)) continue;
    for (char kind : {'R', 'S'}) {
      std::vector<float> st(kind == 'R' ? m.n_embd_r(il) : m.n_embd_s(il), 0.0f);
      for (int32_t t : tokens) fold(st.data(), static_cast<uint32_t>(st.size()), t, il, kind);
      out.insert(out.end(), st.begin(), st.end());
    }
  }
  return out;
}

std::string snapshot(const RecurrentMemory& m) {
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  for (SeqId s = 0; s < static_cast<SeqId>(m.n_seq_max()); ++s) {
    const Pos lo = m.seq_pos_min(s), hi = m.seq_pos_max(s);
    put(&lo, sizeof lo);
    put(&hi, sizeof hi);
    const std::vector<Pos> ck = m.checkpoints(s);
    const uint32_t n = static_cast<uint32_t>(ck.size());
    put(&n, sizeof n);
    if (hi >= 0) put(m.cell(s).data(), m.cell(s).size_bytes());
    for (Pos c : ck) {
      put(&c, sizeof c);
      put(m.checkpoint(s, c).data(), m.checkpoint(s, c).size_bytes());
    }
  }
  return out;
}

std::map<std::pair<SeqId, Pos>, std::string> spec_snapshot(const RecurrentMemory& m) {
  std::map<std::pair<SeqId, Pos>, std::string> out;
  for (SeqId s = 0; s < static_cast<SeqId>(m.n_seq_max()); ++s) {
    for (Pos c : m.spec_states(s)) {
      const auto b = m.spec_state(s, c);
      out[{s, c}] = std::string(reinterpret_cast<const char*>(b.data()), b.size_bytes());
    }
  }
  return out;
}

std::string snapshot(const HybridMemory& m) { return snapshot(m.kv()) + "|" + snapshot(m.rs()); }

Status decode_fake(Memory& m, const Batch& b, uint32_t n_ubatch, uint32_t n_layer,
                   uint64_t generation) {
  auto ctx = m.init_batch(b, n_ubatch);
  if (!ctx->ok()) return Status::invalid_argument(ctx->message());
  do {
    MNEMO_RETURN_IF_ERROR(ctx->apply());
    write_fake_kv(*ctx, n_layer, generation);
    fake_rs_forward(*ctx, n_layer);
  } while (ctx->next());
  return Status();
}

}  // namespace mnemo::testing
