#include <algorithm>
#include <string>
#include <vector>

#include "mnemo/ubatch.h"

namespace mnemo {

std::string_view split_strategy_name(SplitStrategy s) {
  switch (s) {
    case SplitStrategy::kSimple:
      return "simple";
    case SplitStrategy::kEqual:
      return "equal";
    case SplitStrategy::kSeq:
      return "seq";
  }
  return "unknown";
}

uint32_t Ubatch::n_outputs() const {
  return static_cast<uint32_t>(std::count(output.begin(), output.end(), uint8_t{1}));
}

namespace {

// Builds one ubatch from batch rows `rows` (in the order given).
Ubatch make_ubatch(const PreparedBatch& pb, std::span<const uint32_t> rows, SplitStrategy strategy,
                   uint32_t n_seq_tokens) {
  const Batch& b = *pb.batch;
  Ubatch u;
  u.strategy = strategy;
  u.n_seq_tokens = n_seq_tokens;
  u.n_embd = b.n_embd();
  const size_t n = rows.size();
  u.pos.reserve(n);
  u.output.reserve(n);
  u.batch_row.reserve(n);
  u.seq_begin.reserve(n + 1);
  u.seq_begin.push_back(0);
  if (b.is_embd()) {
    u.embd.reserve(n * b.n_embd());
  } else {
    u.token.reserve(n);
  }
  for (uint32_t r : rows) {
    if (b.is_embd()) {
      const std::span<const float> e = b.embd(r);
      u.embd.insert(u.embd.end(), e.begin(), e.end());
    } else {
      u.token.push_back(b.token(r));
    }
    u.pos.push_back(pb.pos[r]);
    const std::span<const SeqId> seqs = b.seq_ids(r);
    u.seq_id_flat.insert(u.seq_id_flat.end(), seqs.begin(), seqs.end());
    u.seq_begin.push_back(static_cast<uint32_t>(u.seq_id_flat.size()));
    u.output.push_back(b.output(r) ? 1 : 0);
    u.batch_row.push_back(r);
    u.seqs.push_back(seqs[0]);
  }
  std::sort(u.seqs.begin(), u.seqs.end());
  u.seqs.erase(std::unique(u.seqs.begin(), u.seqs.end()), u.seqs.end());
  return u;
}

std::vector<Ubatch> split_simple(const PreparedBatch& pb, uint32_t n_ubatch) {
  std::vector<Ubatch> out;
  const uint32_t n = pb.n_tokens();
  std::vector<uint32_t> rows;
  for (uint32_t i0 = 0; i0 < n; i0 += n_ubatch) {
    const uint32_t i1 = std::min(n, i0 + n_ubatch);
    rows.clear();
    for (uint32_t i = i0; i < i1; ++i) rows.push_back(i);
    out.push_back(make_ubatch(pb, rows, SplitStrategy::kSimple, 0));
  }
  return out;
}

// Rows of each sequence in the caller's order: queue[s] = batch rows whose (only) seq is s.
std::vector<std::vector<uint32_t>> rows_by_seq(const PreparedBatch& pb) {
  std::vector<std::vector<uint32_t>> queue(pb.n_seq_max);
  for (uint32_t i = 0; i < pb.n_tokens(); ++i) {
    queue[pb.batch->seq_ids(i)[0]].push_back(i);
  }
  return queue;
}

std::vector<Ubatch> split_equal(const PreparedBatch& pb, uint32_t n_ubatch) {
  std::vector<std::vector<uint32_t>> queue = rows_by_seq(pb);
  std::vector<size_t> taken(queue.size(), 0);
  auto remaining = [&](size_t s) { return queue[s].size() - taken[s]; };
  std::vector<Ubatch> out;
  std::vector<uint32_t> rows;
  size_t s0 = 0;
  while (true) {
    while (s0 < queue.size() && remaining(s0) == 0) ++s0;
    if (s0 == queue.size()) break;
    // A run of consecutive sequence ids with rows left, at most n_ubatch of them.
    size_t s1 = s0;
    size_t n_rows_min = remaining(s0);
    while (s1 + 1 < queue.size() && remaining(s1 + 1) > 0 && (s1 + 1 - s0 + 1) <= n_ubatch) {
      ++s1;
      n_rows_min = std::min(n_rows_min, remaining(s1));
    }
    const size_t n_seqs = s1 - s0 + 1;
    const size_t n_seq_tokens = std::min(n_rows_min, n_ubatch / n_seqs);
    rows.clear();
    for (size_t s = s0; s <= s1; ++s) {
      for (size_t k = 0; k < n_seq_tokens; ++k) rows.push_back(queue[s][taken[s] + k]);
      taken[s] += n_seq_tokens;
    }
    out.push_back(
        make_ubatch(pb, rows, SplitStrategy::kEqual, static_cast<uint32_t>(n_seq_tokens)));
  }
  return out;
}

std::vector<Ubatch> split_seq(const PreparedBatch& pb, uint32_t n_ubatch) {
  std::vector<std::vector<uint32_t>> queue = rows_by_seq(pb);
  std::vector<size_t> taken(queue.size(), 0);
  std::vector<Ubatch> out;
  // Sequences in the order of their first row in the batch.
  for (uint32_t i = 0; i < pb.n_tokens(); ++i) {
    const SeqId s = pb.batch->seq_ids(i)[0];
    while (taken[s] < queue[s].size()) {
      const size_t n = std::min<size_t>(n_ubatch, queue[s].size() - taken[s]);
      const std::span<const uint32_t> rows(queue[s].data() + taken[s], n);
      out.push_back(make_ubatch(pb, rows, SplitStrategy::kSeq, static_cast<uint32_t>(n)));
      taken[s] += n;
    }
  }
  return out;
}

}  // namespace

Result<std::vector<Ubatch>> split_batch(const PreparedBatch& batch, SplitStrategy strategy,
                                        uint32_t n_ubatch) {
  CHECK(batch.batch != nullptr);
  if (n_ubatch == 0) return Status::invalid_argument("n_ubatch must be at least 1");
  if (strategy != SplitStrategy::kSimple && batch.multi_seq_rows) {
    return Status::invalid_argument(
        "split_" + std::string(split_strategy_name(strategy)) +
        " needs every row to belong to exactly one sequence; this batch has rows shared by "
        "several sequences");
  }
  switch (strategy) {
    case SplitStrategy::kSimple:
      return split_simple(batch, n_ubatch);
    case SplitStrategy::kEqual:
      return split_equal(batch, n_ubatch);
    case SplitStrategy::kSeq:
      return split_seq(batch, n_ubatch);
  }
  return Status::invalid_argument("unknown split strategy");
}

std::vector<uint32_t> output_order(std::span<const Ubatch> ubatches) {
  uint32_t n_rows = 0;
  for (const Ubatch& u : ubatches) {
    for (uint32_t r : u.batch_row) n_rows = std::max(n_rows, r + 1);
  }
  // rank[r]: index of batch row r among the output rows, in the caller's order.
  std::vector<uint32_t> rank(n_rows, UINT32_MAX);
  for (const Ubatch& u : ubatches) {
    for (uint32_t i = 0; i < u.n_tokens(); ++i) {
      if (u.output[i]) rank[u.batch_row[i]] = 0;
    }
  }
  uint32_t n_out = 0;
  for (uint32_t r = 0; r < n_rows; ++r) {
    if (rank[r] != UINT32_MAX) rank[r] = n_out++;
  }
  std::vector<uint32_t> order;
  order.reserve(n_out);
  for (const Ubatch& u : ubatches) {
    for (uint32_t i = 0; i < u.n_tokens(); ++i) {
      if (u.output[i]) order.push_back(rank[u.batch_row[i]]);
    }
  }
  return order;
}

}  // namespace mnemo
