// Requantization of a KV cache while the model stays loaded: KvStorage::convert_stream and
// KvCache::requantize / requantize_seq / requantize_stream (contracts: memory.h, kv_cache.h).
//
// Unit of work: one stream. Its new mapping (all layers, new types) is made first, the rows of
// occupied cells are converted layer by layer (K then V), then the old mapping is released with
// munmap (AlignedBuffer), so resident memory drops right away. A per-sequence requantize maps one
// stream (peak: old + new bytes of that stream); a whole-cache one maps every stream before it
// converts any (peak: old + new bytes of the whole cache), so that it is all or nothing. Rows of
// empty cells are left zero: they hold no data (invariant 2 in memory.h). Large streams are
// converted on the cache's ThreadPool (a task per layer and K / V).
#include <algorithm>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/kv_rotation.h"
#include "memory/kv_storage.h"
#include "mnemo/thread_pool.h"

namespace mnemo {

Status KvStorage::convert_stream(uint32_t s, StreamTypes types, const std::vector<uint32_t>& cells,
                                 ThreadPool* pool) {
  MNEMO_ASSIGN_OR_RETURN(Prepared p, prepare_convert(s, types));
  commit_convert(std::move(p), cells, pool);
  return Status();
}

Result<KvStorage::Prepared> KvStorage::prepare_convert(uint32_t s, StreamTypes types) const {
  CHECK_LT(s, streams_.size());
  Prepared p;
  p.s_ = s;
  p.types_ = types;
  const StreamTypes old = streams_[s].types;
  if (old.k_type == types.k_type && old.v_type == types.v_type && old.rotation == types.rotation) {
    return p;
  }
  MNEMO_RETURN_IF_ERROR(check_types(layers_, s, types));
  MNEMO_ASSIGN_OR_RETURN(Stream fresh, make_stream(n_cells_, layers_, types));
  p.fresh_ = std::move(fresh);
  return p;
}

void KvStorage::commit_convert(Prepared p, const std::vector<uint32_t>& cells, ThreadPool* pool) {
  if (!p.fresh_) return;
  const uint32_t s = p.s_;
  CHECK_LT(s, streams_.size());
  const StreamTypes old = streams_[s].types;
  const StreamTypes types = p.types_;
  Stream& fresh = *p.fresh_;
  const Stream& cur = streams_[s];
  // One task per (layer, K or V); large streams are converted on the pool's threads (the work
  // is independent per tensor), small ones on the calling thread.
  const uint32_t n_tasks = uint32_t(layers_.size()) * 2;
  struct Scratch {
    std::vector<float> f;
    std::vector<uint8_t> src, dst;
  };
  auto convert = [&](uint32_t task, Scratch* scratch) {
    const uint32_t l = task / 2;
    const bool is_k = task % 2 == 0;
    const KvRows a = view(cur, l, is_k);
    const KvRows b = view(fresh, l, is_k);
    scratch->f.resize(a.n_embd);
    scratch->src.resize(a.row_bytes);
    scratch->dst.resize(b.row_bytes);
    for (uint32_t cell : cells) {
      // Types were checked above and at creation: the conversion exists.
      a.get_rows(cell, 1, scratch->src.data());
      const Status st =
          kv_row_convert(a.type, old.rotation, scratch->src.data(), b.type, types.rotation,
                         scratch->dst.data(), a.n_embd, scratch->f.data());
      CHECK(st.ok()) << st.to_string();
      b.set_rows(cell, 1, scratch->dst.data());
    }
  };
  const size_t work = cells.size() * n_tasks;
  if (pool == nullptr || work < (size_t{1} << 14)) {
    Scratch scratch;
    for (uint32_t t = 0; t < n_tasks; ++t) convert(t, &scratch);
  } else {
    std::vector<Scratch> scratch(size_t(pool->n_threads()));  // one per thread
    pool->parallel_for(n_tasks, [&](int64_t task, int thread) {
      convert(uint32_t(task), &scratch[size_t(thread)]);
    });
  }
  streams_[s] = std::move(fresh);  // the old mapping is unmapped here
}

Status KvCache::check_requantize(GgmlType k_type, GgmlType v_type) const {
  for (auto [what, t] : {std::pair{"K", k_type}, std::pair{"V", v_type}}) {
    if (!is_supported_kv_type(t)) {
      return Status::invalid_argument(std::string("requantize: ") + what + " type " +
                                      std::string(type_name(t)) + " is not a KV cache type (" +
                                      std::string(kv_cache_type_names()) + ")");
    }
    const uint32_t bs = block_size(t);
    for (uint32_t l = 0; l < storage_.n_layer(); ++l) {
      const uint32_t n = what[0] == 'K' ? storage_.layer(l).n_embd_k : storage_.layer(l).n_embd_v;
      if (n % bs != 0) {
        return Status::invalid_argument(
            std::string("requantize: ") + what + " type " + std::string(type_name(t)) +
            " needs widths that are " + "multiples of " + std::to_string(bs) + "; layer " +
            std::to_string(storage_.layer(l).il) + " has " + std::to_string(n));
      }
    }
  }
  return Status();
}

Status KvCache::check_requantize_seq(SeqId seq, GgmlType k_type, GgmlType v_type) const {
  MNEMO_RETURN_IF_ERROR(check_seq(seq, "requantize_seq", "seq_id"));
  if (config_.unified) {
    return Status::invalid_argument(
        "requantize_seq: a unified KV cache keeps every sequence in one stream with one K/V "
        "type; requantize the whole cache (requantize) or use split mode (kv_unified = false)");
  }
  return check_requantize(k_type, v_type);
}

Status KvCache::requantize_stream(uint32_t s, GgmlType k_type, GgmlType v_type) {
  CHECK_LT(s, n_stream());
  MNEMO_RETURN_IF_ERROR(check_requantize(k_type, v_type));
  KvStorage::StreamTypes t{k_type, v_type, rotation_for(k_type, v_type)};
  MNEMO_ASSIGN_OR_RETURN(KvStorage::Prepared p, storage_.prepare_convert(s, t));
  commit_stream(std::move(p), s);
  return Status();
}

std::vector<uint32_t> KvCache::occupied_cells(uint32_t s) const {
  const KvCells& c = cells_[s];
  std::vector<uint32_t> occupied;
  occupied.reserve(c.used());
  for (uint32_t i = 0; i < c.used_max(); ++i) {
    if (!c.is_empty(i)) occupied.push_back(i);
  }
  return occupied;
}

void KvCache::commit_stream(KvStorage::Prepared p, uint32_t s) {
  storage_.commit_convert(std::move(p), occupied_cells(s), config_.pool);
  ++epoch_;  // views into the old mapping are gone
}

Result<KvCache::PreparedRequantize> KvCache::prepare_requantize(GgmlType k_type,
                                                                GgmlType v_type) const {
  MNEMO_RETURN_IF_ERROR(check_requantize(k_type, v_type));
  PreparedRequantize out;
  out.k_type = k_type;
  out.v_type = v_type;
  const KvStorage::StreamTypes t{k_type, v_type, rotation_for(k_type, v_type)};
  for (uint32_t s = 0; s < n_stream(); ++s) {
    MNEMO_ASSIGN_OR_RETURN(KvStorage::Prepared p, storage_.prepare_convert(s, t));
    out.streams.push_back(std::move(p));
  }
  return out;
}

void KvCache::commit_requantize(PreparedRequantize p) {
  for (uint32_t s = 0; s < p.streams.size(); ++s) commit_stream(std::move(p.streams[s]), s);
  config_.k_type = p.k_type;
  config_.v_type = p.v_type;
  config_.stream_types.clear();
}

Status KvCache::requantize(GgmlType k_type, GgmlType v_type) {
  // Every stream's new mapping is made before any stream changes: running out of memory on a
  // later stream leaves the cache as it was.
  MNEMO_ASSIGN_OR_RETURN(PreparedRequantize p, prepare_requantize(k_type, v_type));
  commit_requantize(std::move(p));
  return Status();
}

Status KvCache::requantize_seq(SeqId seq, GgmlType k_type, GgmlType v_type) {
  MNEMO_RETURN_IF_ERROR(check_requantize_seq(seq, k_type, v_type));
  return requantize_stream(stream_of(seq), k_type, v_type);
}

}  // namespace mnemo
