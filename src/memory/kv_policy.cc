// KvPolicy: parse a ladder, measure occupancy, move least-recently-active sequences down
// (include/mnemo/kv_policy.h).
#include "mnemo/kv_policy.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include "memory/kv_storage.h"
#include "mnemo/log.h"

namespace mnemo {

namespace {

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) --b;
  return std::string(s.substr(a, b - a));
}

std::string pair_name(GgmlType k, GgmlType v) {
  if (k == v) return std::string(type_name(k));
  return std::string(type_name(k)) + "/" + std::string(type_name(v));
}

std::string fmt_occ(double o) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", o);
  return b;
}

}  // namespace

Result<KvPolicy> KvPolicy::parse(std::string_view spec) {
  KvPolicy p;
  size_t start = 0;
  int index = 0;
  auto bad = [&](const std::string& what) {
    return Status::invalid_argument("--kv-policy '" + std::string(spec) + "': rung " +
                                    std::to_string(index + 1) + ": " + what);
  };
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string_view::npos) end = spec.size();
    const std::string item = trim(spec.substr(start, end - start));
    if (item.empty()) return bad("is empty");
    KvRung r;
    std::string types = item;
    const size_t at = item.find('@');
    if (at != std::string::npos) {
      types = trim(item.substr(0, at));
      const std::string th = trim(item.substr(at + 1));
      char* e = nullptr;
      r.threshold = std::strtod(th.c_str(), &e);
      if (th.empty() || e != th.c_str() + th.size() || !std::isfinite(r.threshold)) {
        return bad("threshold '" + th + "' is not a number");
      }
      if (index == 0)
        return bad("the first rung is the starting precision; it takes no @threshold");
      if (r.threshold <= 0.0 || r.threshold > 1.0) return bad("threshold must be in (0, 1]");
      if (r.threshold <= p.rungs_.back().threshold) {
        return bad("thresholds must increase from rung to rung");
      }
    } else if (index > 0) {
      return bad("needs an @threshold (occupancy in (0, 1])");
    }
    const size_t slash = types.find('/');
    const std::string kn = trim(types.substr(0, slash));
    const std::string vn = slash == std::string::npos ? kn : trim(types.substr(slash + 1));
    const auto k = type_from_name(kn);
    const auto v = type_from_name(vn);
    if (!k || !is_supported_kv_type(*k)) return bad("'" + kn + "' is not a KV cache type");
    if (!v || !is_supported_kv_type(*v)) return bad("'" + vn + "' is not a KV cache type");
    r.k_type = *k;
    r.v_type = *v;
    p.rungs_.push_back(r);
    ++index;
    start = end + 1;
  }
  return p;
}

std::string KvPolicy::to_string() const {
  std::string s;
  for (size_t i = 0; i < rungs_.size(); ++i) {
    if (i > 0) s += ",";
    s += pair_name(rungs_[i].k_type, rungs_[i].v_type);
    if (i > 0) {
      char b[32];
      std::snprintf(b, sizeof b, "@%g", rungs_[i].threshold);
      s += b;
    }
  }
  return s;
}

int KvPolicy::rung_of(GgmlType k_type, GgmlType v_type) const {
  for (size_t i = 0; i < rungs_.size(); ++i) {
    if (rungs_[i].k_type == k_type && rungs_[i].v_type == v_type) return int(i);
  }
  return -1;
}

double KvPolicy::occupancy(const MemoryBreakdown& b) const {
  // Bytes per cell of every (part, stream) at the first rung's types.
  std::map<std::pair<std::string, uint32_t>, double> first_rung_cell;
  for (const MemoryBreakdown::Tensor& t : b.tensors) {
    const GgmlType ty = t.kind == 'K' ? rungs_[0].k_type : rungs_[0].v_type;
    const double per_cell = t.n_embd % block_size(ty) == 0
                                ? double(row_size(ty, t.n_embd))
                                : (t.n_cells ? double(t.bytes) / t.n_cells : 0.0);
    first_rung_cell[{t.part, t.stream}] += per_cell;
  }
  double used = 0, total = 0;
  for (const MemoryBreakdown::Stream& s : b.streams) {
    if (s.n_cells == 0) continue;
    used += double(s.used) * double(s.tensor_bytes) / s.n_cells;
    total += double(s.n_cells) * first_rung_cell[{s.part, s.stream}];
  }
  return total > 0 ? used / total : 0.0;
}

std::string KvPolicy::describe(const MemoryBreakdown& b) const {
  std::string out;
  for (const MemoryBreakdown::Stream& s : b.streams) {
    const int r = rung_of(s.k_type, s.v_type);
    char line[160];
    std::snprintf(line, sizeof line, "%-8s stream %3u rung %s %-12s rot %3u used %u/%u\n",
                  s.part.c_str(), s.stream, r < 0 ? "-" : std::to_string(r).c_str(),
                  pair_name(s.k_type, s.v_type).c_str(), s.rotation, s.used, s.n_cells);
    out += line;
  }
  out += "occupancy " + fmt_occ(occupancy(b)) + " (policy " + to_string() + ")\n";
  return out;
}

Result<std::vector<KvPolicy::Move>> KvPolicy::step(Memory& mem,
                                                   std::span<const uint64_t> last_active,
                                                   uint32_t max_moves) {
  const uint32_t n_seq = mem.n_seq_max();
  if (last_active.size() != n_seq) {
    return Status::invalid_argument("kv-policy: last_active has " +
                                    std::to_string(last_active.size()) + " entries, the memory " +
                                    std::to_string(n_seq) + " sequences");
  }
  std::vector<Move> moves;
  for (uint32_t m = 0; m < max_moves; ++m) {
    const MemoryBreakdown b = mem.breakdown();
    if (b.streams.empty()) break;
    const double occ = occupancy(b);
    int level = 0;  // the highest rung whose threshold the occupancy reached
    for (size_t i = 1; i < rungs_.size(); ++i) {
      if (occ >= rungs_[i].threshold) level = int(i);
    }
    if (level == 0) break;

    // Streams of the first part (kv or kv_base) tell each sequence's rung and size.
    const std::string& part0 = b.streams.front().part;
    std::vector<const MemoryBreakdown::Stream*> first;
    for (const auto& s : b.streams) {
      if (s.part == part0) first.push_back(&s);
    }
    Move mv;
    mv.occupancy_before = occ;
    if (first.size() == 1) {
      // One stream for every sequence (unified): the whole memory moves.
      const int r = rung_of(first[0]->k_type, first[0]->v_type);
      if (r < 0 || r >= level || first[0]->used == 0) break;
      mv.seq = -1;
      mv.from_rung = uint32_t(r);
    } else {
      int best = -1;
      for (uint32_t s = 0; s < first.size() && s < n_seq; ++s) {
        const int r = rung_of(first[s]->k_type, first[s]->v_type);
        if (r < 0 || r >= level || first[s]->used == 0) continue;
        if (best < 0 || last_active[s] < last_active[best] ||
            (last_active[s] == last_active[best] && first[s]->used > first[best]->used)) {
          best = int(s);
        }
      }
      if (best < 0) break;
      mv.seq = best;
      mv.from_rung = uint32_t(rung_of(first[best]->k_type, first[best]->v_type));
      mv.last_active = last_active[best];
    }
    mv.to_rung = mv.from_rung + 1;
    const KvRung& to = rungs_[mv.to_rung];
    const Status st = mv.seq < 0 ? mem.requantize(to.k_type, to.v_type)
                                 : mem.requantize_seq(mv.seq, to.k_type, to.v_type);
    if (!st.ok()) return st.with_context("kv-policy");
    mv.occupancy_after = occupancy(mem.breakdown());
    const KvRung& from = rungs_[mv.from_rung];
    MNEMO_LOG(kInfo) << "kv-policy: occupancy " << fmt_occ(mv.occupancy_before)
                     << " >= " << rungs_[level].threshold << ": "
                     << (mv.seq < 0 ? std::string("all sequences (unified cache)")
                                    : "seq " + std::to_string(mv.seq) + " (last active step " +
                                          std::to_string(mv.last_active) + ")")
                     << " " << pair_name(from.k_type, from.v_type) << " -> "
                     << pair_name(to.k_type, to.v_type) << ", occupancy now "
                     << fmt_occ(mv.occupancy_after);
    moves.push_back(mv);
  }
  return moves;
}

}  // namespace mnemo
