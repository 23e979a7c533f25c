// KvStorage: the K and V tensors of a KV cache, apart from its bookkeeping (docs/design.md §3.2).
//
// For every held layer l and stream s there is one K tensor and one V tensor, each n_cells rows:
//   K[l][s]: [n_embd_k_gqa(l), n_cells] of k_type(s), row i = cell i, row_size(k_type, n_embd)
//   V[l][s]: [n_embd_v_gqa(l), n_cells] of v_type(s), rows per cell (NOT transposed: attention
//            reads quantized K/V straight from rows); for a layer of several K/V heads whose head
//            size is whole blocks of v_type, stored per head ("V planes"): head h's segment of
//            every cell in one plane [head_dim_v, n_cells], the planes one after another. Decoding
//            accumulates V one head per thread; with planes each thread reads one contiguous
//            range instead of every other part of each row (docs/benchmarks.md, "V planes":
//            8-13% less time per f16 decoding attention call at depth 4096 on a 1.5B model's
//            shape).
// A cell's row, whatever the layout, is the concatenation of its heads' segments in head order:
// KvRows::get_rows / set_rows move it as such (state files, the prompt cache, copies and type
// conversions all see rows).
//
// Each stream has its own K/V types and its own mapping (AlignedBuffer) holding all its layers,
// so one stream can be freed and replaced with other types (requantization) on its own.
//
// Supported K/V types: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; every row width
// must be a multiple of the type's block size.
//
// Move-only; copy() deep-copies. Not thread-safe; the bytes behind views may be written by the
// model's threads for the cells of the current ubatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "base/buffer.h"
#include "mnemo/check.h"
#include "mnemo/quant.h"
#include "mnemo/status.h"

namespace mnemo {

class ThreadPool;

/// A view of one K or V tensor of one (layer, stream): [n_embd, n_cells] of `type`, as rows
/// (n_seg 1: cell c's row at data + c * row_bytes) or as n_seg planes (V planes: segment h of
/// cell c, seg_bytes long, at data + h * n_cells * seg_bytes + c * seg_bytes; the row is the
/// segments in order).
struct KvRows {
  GgmlType type = GgmlType::F16;
  uint8_t* data = nullptr;  // row (rows) or segment 0 (planes) of cell 0
  size_t row_bytes = 0;     // bytes of one cell's row = row_size(type, n_embd)
  uint32_t n_embd = 0;      // elements per row
  uint32_t n_cells = 0;     // rows
  uint32_t n_seg = 1;       // 1: rows; > 1: planes of seg_bytes per cell
  size_t seg_bytes = 0;     // planes: row_bytes / n_seg (whole blocks of `type`)

  /// Whether cells' rows are contiguous (row() is usable).
  bool is_rows() const { return n_seg == 1; }
  /// Cell c's row; rows only (CHECKed).
  uint8_t* row(uint32_t cell) const {
    CHECK(n_seg == 1) << "KvRows::row on a tensor stored as planes";
    return data + static_cast<size_t>(cell) * row_bytes;
  }
  /// Bytes from one cell to the next within a segment: row_bytes (rows) or seg_bytes (planes).
  size_t cell_stride() const { return n_seg == 1 ? row_bytes : seg_bytes; }
  /// Bytes from one plane to the next (planes), 0 for rows.
  size_t plane_bytes() const { return n_seg == 1 ? 0 : static_cast<size_t>(n_cells) * seg_bytes; }
  /// Copies the rows of cells [cell, cell + n) to out[0, n * row_bytes), one after another.
  void get_rows(uint32_t cell, uint32_t n, uint8_t* out) const;
  /// The inverse of get_rows: rows of cells [cell, cell + n) from in[0, n * row_bytes).
  void set_rows(uint32_t cell, uint32_t n, const uint8_t* in) const;
};

/// True for the types a KV cache may store (list in the header comment).
bool is_supported_kv_type(GgmlType t);

class KvStorage {
 public:
  /// One held layer: its model layer index, K / V row widths (elements) and V head size
  /// (elements; 0: V kept as rows; otherwise V planes wherever the head size is whole blocks of
  /// the stream's V type and the row holds more than one head).
  struct Layer {
    uint32_t il = 0;
    uint32_t n_embd_k = 0;
    uint32_t n_embd_v = 0;
    uint32_t head_dim_v = 0;
  };
  /// K / V types of one stream, and the Hadamard rotation of its rows (kv_rotation.h): 0 = rows
  /// as computed, d = every head of d elements stored rotated by H_d (d must divide every width).
  struct StreamTypes {
    GgmlType k_type = GgmlType::F16;
    GgmlType v_type = GgmlType::F16;
    uint32_t rotation = 0;
  };

  /// Allocates n_cells rows per (layer, stream), zero-filled. Errors: kInvalidArgument for an
  /// unsupported type or a row width that is not a multiple of its block size (naming the layer
  /// and stream), kNoSpace when the OS refuses the mapping.
  static Result<KvStorage> create(uint32_t n_cells, std::vector<Layer> layers,
                                  std::vector<StreamTypes> streams);

  KvStorage(KvStorage&&) noexcept = default;
  KvStorage& operator=(KvStorage&&) noexcept = default;
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  Result<KvStorage> copy() const;

  uint32_t n_layer() const { return static_cast<uint32_t>(layers_.size()); }
  uint32_t n_stream() const { return static_cast<uint32_t>(streams_.size()); }
  uint32_t n_cells() const { return n_cells_; }
  const Layer& layer(uint32_t l) const { return layers_[l]; }
  GgmlType k_type(uint32_t s) const { return streams_[s].types.k_type; }
  GgmlType v_type(uint32_t s) const { return streams_[s].types.v_type; }
  uint32_t rotation(uint32_t s) const { return streams_[s].types.rotation; }
  const StreamTypes& types(uint32_t s) const { return streams_[s].types; }

  /// Views of held layer l (index into layers, not the model layer) and stream s.
  KvRows k(uint32_t l, uint32_t s) const;
  KvRows v(uint32_t l, uint32_t s) const;

  /// Bytes of one cell's rows over all layers, K and V (what save_cell writes).
  size_t cell_bytes(uint32_t s) const { return streams_[s].cell_bytes; }
  /// Copies every layer's K and V row of cell `cell` to out[0, cell_bytes(s)).
  void save_cell(uint32_t s, uint32_t cell, uint8_t* out) const;
  /// The inverse of save_cell.
  void restore_cell(uint32_t s, uint32_t cell, const uint8_t* in);
  /// Copies every layer's K and V row from (src_s, src_cell) to (dst_s, dst_cell), converting
  /// through f32 (kv_row_convert: types and rotation) when the streams' formats differ.
  void copy_cell(uint32_t src_s, uint32_t src_cell, uint32_t dst_s, uint32_t dst_cell);

  /// Frees stream s's tensors and maps new zero-filled ones of the given types (contents lost:
  /// the caller converts or re-fills the rows of occupied cells, or clears them). Errors as
  /// create(); on error the stream is unchanged.
  Status replace_stream(uint32_t s, StreamTypes types);
  /// Requantization (kv_requantize.cc): maps stream s anew with `types` and converts the K/V rows
  /// of `cells` layer by layer (kv_row_convert), then releases the old mapping (munmap), so the
  /// peak is the old plus the new size of this one stream. Rows of other cells are zero. Errors
  /// as create(); on error the stream is unchanged. A no-op when the types are the same.
  /// Large streams are converted on pool's threads (one task per layer and K / V; the rows do
  /// not depend on which thread converts them); small ones, or all when pool is null, on the
  /// calling thread. pool must not be running another call (ThreadPool's one-call rule).
  Status convert_stream(uint32_t s, StreamTypes types, const std::vector<uint32_t>& cells,
                        ThreadPool* pool);

  class Prepared;
  /// convert_stream in two steps, so that a caller converting several streams maps them all
  /// before it changes any (whole-cache requantize is all or nothing). prepare_convert checks
  /// the types and maps the new tensors (errors as convert_stream; nothing changes);
  /// commit_convert converts the rows of `cells` into them and releases the old mapping, and
  /// cannot fail. A Prepared for unchanged types maps nothing and commits as a no-op.
  Result<Prepared> prepare_convert(uint32_t s, StreamTypes types) const;
  void commit_convert(Prepared p, const std::vector<uint32_t>& cells, ThreadPool* pool);

  /// Bytes of the K (kind 'K') or V tensor of (l, s): n_cells * row_size.
  size_t tensor_bytes(uint32_t l, uint32_t s, char kind) const;
  /// Bytes mapped for stream s (page-rounded).
  size_t mapped_bytes(uint32_t s) const { return streams_[s].buf.mapped_bytes(); }

 private:
  struct Stream {
    StreamTypes types;
    AlignedBuffer buf;          // all layers' K and V tensors of this stream
    std::vector<size_t> k_off;  // [n_layer] byte offset of K[l] in buf
    std::vector<size_t> v_off;  // [n_layer] byte offset of V[l] in buf
    std::vector<size_t> k_row;  // [n_layer] K row bytes
    std::vector<size_t> v_row;  // [n_layer] V row bytes
    std::vector<uint32_t> v_seg;  // [n_layer] V planes (1: rows)
    size_t cell_bytes = 0;      // sum of k_row + v_row
  };

 public:
  /// A stream's new mapping, made by prepare_convert and consumed by commit_convert (move-only;
  /// dropping it unmaps it and changes nothing).
  class Prepared {
   private:
    friend class KvStorage;
    Prepared() = default;
    uint32_t s_ = 0;
    StreamTypes types_{};
    std::optional<Stream> fresh_;  // empty: the types are unchanged
  };

 private:
  KvStorage() = default;
  static Status check_types(const std::vector<Layer>& layers, uint32_t s, StreamTypes t);
  /// The K (is_k) or V view of held layer l in stream `st` (installed or not: commit_convert
  /// reads a new stream before it replaces the old).
  KvRows view(const Stream& st, uint32_t l, bool is_k) const;
  static Result<Stream> make_stream(uint32_t n_cells, const std::vector<Layer>& layers,
                                    StreamTypes types);

  uint32_t n_cells_ = 0;
  std::vector<Layer> layers_;
  std::vector<Stream> streams_;
};

}  // namespace mnemo
