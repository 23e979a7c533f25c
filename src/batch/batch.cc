#include "mnemo/batch.h"

#include <algorithm>
#include <string>

namespace mnemo {

void Batch::add_row(Pos pos, std::span<const SeqId> seq_ids, bool output) {
  pos_.push_back(pos);
  seq_id_.insert(seq_id_.end(), seq_ids.begin(), seq_ids.end());
  seq_begin_.push_back(static_cast<uint32_t>(seq_id_.size()));
  output_.push_back(output ? 1 : 0);
}

void Batch::add(int32_t token, Pos pos, std::span<const SeqId> seq_ids, bool output) {
  if (n_embd_ > 0 && shape_error_.empty()) {
    shape_error_ = "row " + std::to_string(n_tokens()) +
                   " is a token row in a batch of embedding rows (rows cannot be mixed)";
  }
  token_.push_back(token);
  add_row(pos, seq_ids, output);
}

void Batch::add_auto(int32_t token, std::span<const SeqId> seq_ids, bool output) {
  add(token, kAutoPos, seq_ids, output);
}

void Batch::add_embd(std::span<const float> embd, Pos pos, std::span<const SeqId> seq_ids,
                     bool output) {
  if (shape_error_.empty()) {
    if (!token_.empty()) {
      shape_error_ = "row " + std::to_string(n_tokens()) +
                     " is an embedding row in a batch of token rows (rows cannot be mixed)";
    } else if (embd.empty()) {
      shape_error_ = "row " + std::to_string(n_tokens()) + " has an empty embedding";
    } else if (n_embd_ != 0 && embd.size() != n_embd_) {
      shape_error_ = "row " + std::to_string(n_tokens()) + " has an embedding of width " +
                     std::to_string(embd.size()) + ", earlier rows have width " +
                     std::to_string(n_embd_);
    }
  }
  if (n_embd_ == 0 && token_.empty()) n_embd_ = static_cast<uint32_t>(embd.size());
  // Keep the [n_tokens, n_embd] shape even for a malformed row (validation rejects the batch).
  const size_t base = embd_.size();
  embd_.resize(base + n_embd_, 0.0f);
  std::copy_n(embd.begin(), std::min<size_t>(embd.size(), n_embd_), embd_.begin() + base);
  add_row(pos, seq_ids, output);
}

void Batch::clear() {
  token_.clear();
  embd_.clear();
  n_embd_ = 0;
  pos_.clear();
  seq_begin_.assign(1, 0);
  seq_id_.clear();
  output_.clear();
  shape_error_.clear();
}

Status check_batch_shape(const Batch& batch) {
  if (!batch.shape_error_.empty()) return Status::invalid_argument(batch.shape_error_);
  return Status();
}

namespace {

std::string row_name(uint32_t i) { return "batch row " + std::to_string(i); }

}  // namespace

Result<PreparedBatch> prepare_batch(const Batch& batch, const BatchLimits& limits,
                                    const SeqPosMaxFn& seq_pos_max) {
  MNEMO_RETURN_IF_ERROR(check_batch_shape(batch));
  const uint32_t n = batch.n_tokens();
  if (n == 0) return Status::invalid_argument("the batch is empty");
  if (limits.n_batch > 0 && n > limits.n_batch) {
    return Status::invalid_argument("the batch has " + std::to_string(n) +
                                    " rows, more than n_batch = " + std::to_string(limits.n_batch));
  }
  CHECK(limits.n_seq_max >= 1 && limits.n_seq_max <= kMaxSeq) << "n_seq_max " << limits.n_seq_max;
  if (batch.is_embd() && limits.n_embd > 0 && batch.n_embd() != limits.n_embd) {
    return Status::invalid_argument(
        "embedding rows have width " + std::to_string(batch.n_embd()) +
        ", the model expects n_embd = " + std::to_string(limits.n_embd));
  }

  PreparedBatch out;
  out.batch = &batch;
  out.n_seq_max = limits.n_seq_max;
  out.pos.resize(n);

  const bool auto_pos = batch.pos(0) == Batch::kAutoPos;
  // next[s]: the position the next row of sequence s must have; INT32_MIN = not yet looked up.
  std::vector<Pos> next(limits.n_seq_max, INT32_MIN);
  std::vector<uint8_t> seen_in_batch(limits.n_seq_max, 0);
  for (uint32_t i = 0; i < n; ++i) {
    if (!batch.is_embd() && limits.n_vocab > 0 &&
        (batch.token(i) < 0 || static_cast<uint32_t>(batch.token(i)) >= limits.n_vocab)) {
      return Status::invalid_argument(
          row_name(i) + ": token id " + std::to_string(batch.token(i)) +
          " is outside [0, n_vocab = " + std::to_string(limits.n_vocab) + ")");
    }
    const std::span<const SeqId> seqs = batch.seq_ids(i);
    if (seqs.empty()) return Status::invalid_argument(row_name(i) + " has no seq_id");
    if (seqs.size() > 1) {
      if (!limits.allow_multi_seq_rows) {
        return Status::invalid_argument(
            row_name(i) + " belongs to " + std::to_string(seqs.size()) +
            " sequences, but this memory keeps one stream per sequence (split mode): every row "
            "must have exactly one seq_id; share a prefix with seq_cp instead");
      }
      out.multi_seq_rows = true;
    }
    for (size_t k = 0; k < seqs.size(); ++k) {
      const SeqId s = seqs[k];
      if (s < 0 || static_cast<uint32_t>(s) >= limits.n_seq_max) {
        return Status::invalid_argument(
            row_name(i) + ": seq_id " + std::to_string(s) +
            " is outside [0, n_seq_max = " + std::to_string(limits.n_seq_max) + ")");
      }
      for (size_t j = 0; j < k; ++j) {
        if (seqs[j] == s) {
          return Status::invalid_argument(row_name(i) + " lists seq_id " + std::to_string(s) +
                                          " twice");
        }
      }
      if (next[s] == INT32_MIN) next[s] = seq_pos_max(s) + 1;
    }

    const Pos given = batch.pos(i);
    if ((given == Batch::kAutoPos) != auto_pos) {
      return Status::invalid_argument(
          row_name(i) +
          (auto_pos ? " has an explicit position but row 0 asked for an automatic one"
                    : " asks for an automatic position but row 0 has an explicit "
                      "one") +
          " (a batch uses explicit or automatic positions, not both)");
    }
    Pos p = given;
    if (auto_pos) {
      p = next[seqs[0]];
      for (SeqId s : seqs) {
        if (next[s] != p) {
          return Status::invalid_argument(
              row_name(i) +
              " asks for an automatic position, but its sequences continue at "
              "different positions (seq_id " +
              std::to_string(seqs[0]) + " at " + std::to_string(p) + ", seq_id " +
              std::to_string(s) + " at " + std::to_string(next[s]) + ")");
        }
      }
    } else {
      for (SeqId s : seqs) {
        if (p != next[s]) {
          const std::string why =
              seen_in_batch[s] ? "the previous row of this sequence in the batch has position " +
                                     std::to_string(next[s] - 1)
                               : (next[s] == 0 ? "the memory holds no position of this sequence"
                                               : "the memory holds this sequence up to position " +
                                                     std::to_string(next[s] - 1));
          return Status::invalid_argument(row_name(i) + ": seq_id " + std::to_string(s) +
                                          " has position " + std::to_string(p) + ", expected " +
                                          std::to_string(next[s]) + " (" + why + ")");
        }
      }
    }
    if (p == INT32_MAX) {
      return Status::invalid_argument(row_name(i) + ": position " + std::to_string(p) +
                                      " leaves no room for a next position");
    }
    out.pos[i] = p;
    for (SeqId s : seqs) {
      next[s] = p + 1;
      seen_in_batch[s] = 1;
    }
  }
  return out;
}

}  // namespace mnemo
