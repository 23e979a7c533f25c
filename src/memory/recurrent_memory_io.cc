// State save / restore of RecurrentMemory (protocol: memory.h; bytes:
// docs/formats/state_recurrent.md, constants: src/memory/recurrent_memory_format.h).
//
// Reading is done twice by state.cc (state.h): the dry run parses and validates every field
// (and, through end_section, every checksum) and changes nothing; the apply run parses the same
// bytes again and copies the states into place. Both runs share one parser (read_part) so they
// cannot disagree on what is valid.
#include <cstring>
#include <string>
#include <vector>

#include "memory/pos_range.h"
#include "memory/recurrent_memory.h"
#include "memory/recurrent_memory_format.h"
#include "mnemo/state_io.h"

namespace mnemo {

namespace sf = state_format;

namespace {

// States are read in views of at most this many bytes (one buffer for file sources).
constexpr size_t kChunkBytes = size_t{1} << 20;

// Reads n_bytes of payload into dst (null: consumed without copying).
Status read_floats(StateReader& r, float* dst, size_t n_bytes) {
  size_t done = 0;
  while (done < n_bytes) {
    const size_t n = std::min(kChunkBytes, n_bytes - done);
    if (dst == nullptr) {
      MNEMO_RETURN_IF_ERROR(r.skip(n));
    } else {
      const uint8_t* p = nullptr;
      MNEMO_RETURN_IF_ERROR(r.view(n, &p));
      std::memcpy(reinterpret_cast<uint8_t*>(dst) + done, p, n);
    }
    done += n;
  }
  return Status();
}

}  // namespace

Status RecurrentMemory::state_write(StateWriter& w, const StateWriteSpec& spec) const {
  std::vector<SeqId> seqs;
  if (spec.scope == sf::Scope::kSequence) {
    CHECK(spec.seq >= 0 && uint32_t(spec.seq) < config_.n_seq_max);
    if (seqs_[spec.seq].pos_max >= 0) seqs.push_back(spec.seq);
  } else {
    for (SeqId s = 0; s < SeqId(config_.n_seq_max); ++s) {
      if (seqs_[s].pos_max >= 0) seqs.push_back(s);
    }
  }
  std::vector<uint32_t> held;
  for (uint32_t il = 0; il < layer_off_r_.size(); ++il) {
    if (holds_layer(il)) held.push_back(il);
  }
  MNEMO_RETURN_IF_ERROR(
      w.begin_section(sf::kTagRsPart, sf::kRsPartFixedBytes + held.size() * sf::kRsLayerBytes));
  MNEMO_RETURN_IF_ERROR(w.put_u32(sf::kRsRoleRecurrent));
  MNEMO_RETURN_IF_ERROR(w.put_u32(config_.n_seq_max));
  MNEMO_RETURN_IF_ERROR(w.put_u32(config_.checkpoint_interval));
  MNEMO_RETURN_IF_ERROR(w.put_u32(config_.n_checkpoints));
  MNEMO_RETURN_IF_ERROR(w.put_u32(uint32_t(seqs.size())));
  MNEMO_RETURN_IF_ERROR(w.put_u32(uint32_t(held.size())));
  for (uint32_t il : held) {
    MNEMO_RETURN_IF_ERROR(w.put_u32(il));
    MNEMO_RETURN_IF_ERROR(w.put_u32(config_.n_embd_r[il]));
    MNEMO_RETURN_IF_ERROR(w.put_u32(config_.n_embd_s[il]));
  }
  MNEMO_RETURN_IF_ERROR(w.end_section());

  const size_t state_bytes = n_floats_ * sizeof(float);
  for (SeqId s : seqs) {
    const SeqMeta& m = seqs_[s];
    MNEMO_RETURN_IF_ERROR(
        w.begin_section(sf::kTagRsSeq, sf::kRsSeqFixedBytes + 4 * m.ckpts.size()));
    MNEMO_RETURN_IF_ERROR(w.put_i32(s));
    MNEMO_RETURN_IF_ERROR(w.put_i32(m.pos_min));
    MNEMO_RETURN_IF_ERROR(w.put_i32(m.pos_max));
    MNEMO_RETURN_IF_ERROR(w.put_u32(uint32_t(m.ckpts.size())));
    for (const Checkpoint& c : m.ckpts) MNEMO_RETURN_IF_ERROR(w.put_i32(c.pos));
    MNEMO_RETURN_IF_ERROR(w.end_section());

    MNEMO_RETURN_IF_ERROR(w.begin_section(sf::kTagRsData, (1 + m.ckpts.size()) * state_bytes));
    if (w.counts_only()) {
      MNEMO_RETURN_IF_ERROR(w.skip((1 + m.ckpts.size()) * state_bytes));
    } else {
      MNEMO_RETURN_IF_ERROR(w.put(cell_ptr(s), state_bytes));
      for (const Checkpoint& c : m.ckpts)
        MNEMO_RETURN_IF_ERROR(w.put(ckpt_ptr(c.cell), state_bytes));
    }
    MNEMO_RETURN_IF_ERROR(w.end_section());
  }
  return Status();
}

Status RecurrentMemory::state_read(StateReader& r, const StateReadSpec& spec) {
  const bool seq_scope = spec.scope == sf::Scope::kSequence;
  const bool apply = !spec.dry_run;
  auto mismatch = [&](const std::string& what) {
    return r.error(StatusCode::kInvalidArgument, "recurrent part: " + what);
  };
  if (seq_scope) CHECK(spec.dst_seq >= 0 && uint32_t(spec.dst_seq) < config_.n_seq_max);

  // RSPT.
  MNEMO_RETURN_IF_ERROR(r.expect_section(sf::kTagRsPart).status());
  uint32_t f[6];
  for (uint32_t& x : f) MNEMO_RETURN_IF_ERROR(r.get_u32(&x));
  const uint32_t n_blocks = f[4], n_layer = f[5];
  if (f[0] != sf::kRsRoleRecurrent) return r.corrupt("part role " + std::to_string(f[0]));
  if (f[1] == 0 || f[1] > kMaxSeq || n_blocks > f[1] || (seq_scope && n_blocks > 1)) {
    return r.corrupt(std::to_string(n_blocks) + " sequence blocks for n_seq_max " +
                     std::to_string(f[1]));
  }
  std::vector<uint32_t> held;
  for (uint32_t il = 0; il < layer_off_r_.size(); ++il) {
    if (holds_layer(il)) held.push_back(il);
  }
  if (n_layer != held.size() || uint64_t(n_layer) * sf::kRsLayerBytes != r.remaining()) {
    if (uint64_t(n_layer) * sf::kRsLayerBytes != r.remaining()) {
      return r.corrupt(std::to_string(n_layer) + " layers do not fill the section");
    }
    return mismatch("the state holds " + std::to_string(n_layer) +
                    " recurrent layers, this memory " + std::to_string(held.size()));
  }
  for (uint32_t k = 0; k < n_layer; ++k) {
    uint32_t il = 0, nr = 0, ns = 0;
    MNEMO_RETURN_IF_ERROR(r.get_u32(&il));
    MNEMO_RETURN_IF_ERROR(r.get_u32(&nr));
    MNEMO_RETURN_IF_ERROR(r.get_u32(&ns));
    if (il != held[k] || nr != config_.n_embd_r[il] || ns != config_.n_embd_s[il]) {
      return mismatch("recurrent layer entry " + std::to_string(k) + " is model layer " +
                      std::to_string(il) + " with conv/ssm states of " + std::to_string(nr) + "/" +
                      std::to_string(ns) + " floats; this memory has layer " +
                      std::to_string(held[k]) + " with " +
                      std::to_string(config_.n_embd_r[held[k]]) + "/" +
                      std::to_string(config_.n_embd_s[held[k]]));
    }
  }
  MNEMO_RETURN_IF_ERROR(r.end_section());

  // A failed apply (the source changed after the dry run) empties the destination (memory.h).
  auto fail = [&](Status st) {
    if (!st.ok() && apply) {
      if (seq_scope) {
        reset_seq(spec.dst_seq);
      } else {
        for (SeqId s = 0; s < SeqId(config_.n_seq_max); ++s) reset_seq(s);
      }
      ++epoch_;
    }
    return st;
  };
  if (apply) {
    // The state replaces the destination; from here on a failure leaves it empty.
    if (seq_scope) {
      reset_seq(spec.dst_seq);
    } else {
      for (SeqId s = 0; s < SeqId(config_.n_seq_max); ++s) reset_seq(s);
    }
    ++epoch_;
  }

  const size_t state_bytes = n_floats_ * sizeof(float);
  std::vector<uint8_t> seen(config_.n_seq_max, 0);
  for (uint32_t b = 0; b < n_blocks; ++b) {
    // RSSQ.
    MNEMO_RETURN_IF_ERROR(fail(r.expect_section(sf::kTagRsSeq).status()));
    SeqId seq = 0;
    Pos pos_min = 0, pos_max = 0;
    uint32_t n_ckpt = 0;
    MNEMO_RETURN_IF_ERROR(fail(r.get_i32(&seq)));
    MNEMO_RETURN_IF_ERROR(fail(r.get_i32(&pos_min)));
    MNEMO_RETURN_IF_ERROR(fail(r.get_i32(&pos_max)));
    MNEMO_RETURN_IF_ERROR(fail(r.get_u32(&n_ckpt)));
    if (seq_scope ? seq != spec.src_seq : (seq < 0 || uint32_t(seq) >= f[1])) {
      return fail(r.corrupt("block of seq_id " + std::to_string(seq)));
    }
    if (!seq_scope && uint32_t(seq) >= config_.n_seq_max) {
      return fail(mismatch("seq_id " + std::to_string(seq) + " does not exist in this memory (" +
                           std::to_string(config_.n_seq_max) + " sequences)"));
    }
    if (!seq_scope && seen[seq]++)
      return fail(r.corrupt("seq_id " + std::to_string(seq) + " twice"));
    if (pos_min < 0 || pos_min > pos_max || pos_max > kPosMax) {
      return fail(r.corrupt("positions [" + std::to_string(pos_min) + ", " +
                            std::to_string(pos_max) + "]"));
    }
    if (n_ckpt > sf::kMaxCheckpointsPerSeq || uint64_t(n_ckpt) * 4 != r.remaining()) {
      return fail(r.corrupt(std::to_string(n_ckpt) + " checkpoints do not fill the section"));
    }
    std::vector<Pos> ckpt(n_ckpt);
    for (uint32_t k = 0; k < n_ckpt; ++k) {
      MNEMO_RETURN_IF_ERROR(fail(r.get_i32(&ckpt[k])));
      if (ckpt[k] < pos_min || ckpt[k] > pos_max || (k > 0 && ckpt[k] <= ckpt[k - 1])) {
        return fail(r.corrupt("checkpoint position " + std::to_string(ckpt[k]) +
                              " is out of order or outside [" + std::to_string(pos_min) + ", " +
                              std::to_string(pos_max) + "]"));
      }
    }
    MNEMO_RETURN_IF_ERROR(fail(r.end_section()));
    if (seq_scope && !apply && spec.summary != nullptr && !spec.summary->set) {
      *spec.summary = StateSeqSummary{true, pos_min, pos_max};
    }

    // RSDT: the live state, then the checkpoints; the newest ones that fit are kept.
    MNEMO_RETURN_IF_ERROR(fail(r.expect_section(sf::kTagRsData).status()));
    if (r.remaining() != (1 + uint64_t(n_ckpt)) * state_bytes) {
      return fail(r.corrupt(std::to_string(r.remaining()) + " bytes of state data, expected " +
                            std::to_string((1 + uint64_t(n_ckpt)) * state_bytes)));
    }
    const SeqId dst = seq_scope ? spec.dst_seq : seq;
    const uint32_t n_keep = std::min(n_ckpt, config_.n_checkpoints);
    MNEMO_RETURN_IF_ERROR(fail(read_floats(r, apply ? cell_ptr(dst) : nullptr, state_bytes)));
    SeqMeta m;
    m.pos_min = pos_min;
    m.pos_max = pos_max;
    for (uint32_t k = 0; k < n_ckpt; ++k) {
      const bool keep = k >= n_ckpt - n_keep;
      const uint32_t cell = uint32_t(dst) * config_.n_checkpoints + uint32_t(m.ckpts.size());
      MNEMO_RETURN_IF_ERROR(
          fail(read_floats(r, apply && keep ? ckpt_ptr(cell) : nullptr, state_bytes)));
      if (keep) m.ckpts.push_back({ckpt[k], cell});
    }
    MNEMO_RETURN_IF_ERROR(fail(r.end_section()));
    if (apply) seqs_[dst] = std::move(m);
  }
  if (apply) ++epoch_;
  return Status();
}

}  // namespace mnemo
