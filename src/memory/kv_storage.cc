#include "memory/kv_storage.h"

#include <cstring>

#include <string>
#include <utility>
#include "memory/kv_rotation.h"

namespace mnemo {

namespace {

// Sub-tensors of a stream's mapping start on this boundary (any block type's alignment divides
// it, and it keeps rows of different tensors off shared cache lines).
constexpr size_t kTensorAlign = 64;

size_t align_up(size_t n) { return (n + kTensorAlign - 1) / kTensorAlign * kTensorAlign; }

// V planes per cell row for layer l under V type t (1: rows): one per K/V head when the head
// size is whole blocks of t and the row holds more than one head.
uint32_t v_planes(const KvStorage::Layer& l, GgmlType t) {
  const uint32_t hd = l.head_dim_v;
  if (hd == 0 || l.n_embd_v % hd != 0 || l.n_embd_v / hd < 2 || hd % block_size(t) != 0) return 1;
  return l.n_embd_v / hd;
}

}  // namespace

void KvRows::get_rows(uint32_t cell, uint32_t n, uint8_t* out) const {
  if (n_seg == 1) {
    std::memcpy(out, data + size_t(cell) * row_bytes, size_t(n) * row_bytes);
    return;
  }
  const size_t plane = plane_bytes();
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* src = data + size_t(cell + i) * seg_bytes;
    for (uint32_t h = 0; h < n_seg; ++h, out += seg_bytes) {
      std::memcpy(out, src + h * plane, seg_bytes);
    }
  }
}

void KvRows::set_rows(uint32_t cell, uint32_t n, const uint8_t* in) const {
  if (n_seg == 1) {
    std::memmove(data + size_t(cell) * row_bytes, in, size_t(n) * row_bytes);
    return;
  }
  const size_t plane = plane_bytes();
  for (uint32_t i = 0; i < n; ++i) {
    uint8_t* dst = data + size_t(cell + i) * seg_bytes;
    for (uint32_t h = 0; h < n_seg; ++h, in += seg_bytes) {
      std::memmove(dst + h * plane, in, seg_bytes);
    }
  }
}

bool is_supported_kv_type(GgmlType t) { return is_kv_cache_type(t); }

Status KvStorage::check_types(const std::vector<Layer>& layers, uint32_t s, StreamTypes t) {
  if (!is_valid_kv_rotation(t.rotation)) {
    return Status::invalid_argument("rotation " + std::to_string(t.rotation) + " of stream " +
                                    std::to_string(s) + " is not 0 or a power of two");
  }
  for (const Layer& l : layers) {
    if (t.rotation != 0 && (l.n_embd_k % t.rotation != 0 || l.n_embd_v % t.rotation != 0)) {
      return Status::invalid_argument("rotation " + std::to_string(t.rotation) +
                                      " does not divide the row widths of layer " +
                                      std::to_string(l.il));
    }
  }
  for (int kind = 0; kind < 2; ++kind) {
    const GgmlType type = kind == 0 ? t.k_type : t.v_type;
    const char* what = kind == 0 ? "k_type" : "v_type";
    if (!is_supported_kv_type(type)) {
      return Status::invalid_argument(std::string(what) + " " + std::string(type_name(type)) +
                                      " of stream " + std::to_string(s) +
                                      " is not a KV cache type (use " +
                                      std::string(kv_cache_type_names()) + ")");
    }
    const TypeTraits& tr = traits(type);
    if (!tr.can_quantize || !tr.can_dequantize) {
      return Status::not_supported(std::string(what) + " " + std::string(tr.name) +
                                   ": this build has no reference quantize/dequantize for it");
    }
    for (const Layer& l : layers) {
      const uint32_t n = kind == 0 ? l.n_embd_k : l.n_embd_v;
      if (n == 0 || n % tr.block_size != 0) {
        return Status::invalid_argument(std::string(what) + " " + std::string(tr.name) +
                                        " needs row widths that are a "
                                        "positive multiple of its block size " +
                                        std::to_string(tr.block_size) + "; layer " +
                                        std::to_string(l.il) + " has n_embd_" +
                                        (kind == 0 ? "k" : "v") + "_gqa = " + std::to_string(n));
      }
    }
  }
  return Status();
}

Result<KvStorage::Stream> KvStorage::make_stream(uint32_t n_cells, const std::vector<Layer>& layers,
                                                 StreamTypes types) {
  Stream st;
  st.types = types;
  size_t off = 0;
  for (const Layer& l : layers) {
    const size_t k_row = row_size(types.k_type, l.n_embd_k);
    const size_t v_row = row_size(types.v_type, l.n_embd_v);
    st.k_off.push_back(off);
    off = align_up(off + k_row * n_cells);
    st.v_off.push_back(off);
    off = align_up(off + v_row * n_cells);
    st.k_row.push_back(k_row);
    st.v_row.push_back(v_row);
    st.v_seg.push_back(v_planes(l, types.v_type));
    st.cell_bytes += k_row + v_row;
  }
  MNEMO_ASSIGN_OR_RETURN(st.buf, AlignedBuffer::allocate(off));
  return st;
}

Result<KvStorage> KvStorage::create(uint32_t n_cells, std::vector<Layer> layers,
                                    std::vector<StreamTypes> streams) {
  CHECK(n_cells > 0);
  CHECK(!streams.empty());
  for (uint32_t s = 0; s < streams.size(); ++s) {
    MNEMO_RETURN_IF_ERROR(check_types(layers, s, streams[s]));
  }
  KvStorage out;
  out.n_cells_ = n_cells;
  out.layers_ = std::move(layers);
  for (const StreamTypes& t : streams) {
    MNEMO_ASSIGN_OR_RETURN(Stream st, make_stream(n_cells, out.layers_, t));
    out.streams_.push_back(std::move(st));
  }
  return out;
}

Result<KvStorage> KvStorage::copy() const {
  KvStorage out;
  out.n_cells_ = n_cells_;
  out.layers_ = layers_;
  for (const Stream& st : streams_) {
    // Every stream's layout follows from the layers and its types (make_stream): a fresh stream
    // of the same types, then the bytes.
    MNEMO_ASSIGN_OR_RETURN(Stream c, make_stream(n_cells_, layers_, st.types));
    if (st.buf.size() > 0) std::memcpy(c.buf.data(), st.buf.data(), st.buf.size());
    out.streams_.push_back(std::move(c));
  }
  return out;
}

KvRows KvStorage::k(uint32_t l, uint32_t s) const { return view(streams_[s], l, true); }

KvRows KvStorage::v(uint32_t l, uint32_t s) const { return view(streams_[s], l, false); }

KvRows KvStorage::view(const Stream& st, uint32_t l, bool is_k) const {
  if (is_k) {
    return KvRows{st.types.k_type, const_cast<uint8_t*>(st.buf.data()) + st.k_off[l], st.k_row[l],
                  layers_[l].n_embd_k, n_cells_};
  }
  return KvRows{st.types.v_type,
                const_cast<uint8_t*>(st.buf.data()) + st.v_off[l],
                st.v_row[l],
                layers_[l].n_embd_v,
                n_cells_,
                st.v_seg[l],
                st.v_row[l] / st.v_seg[l]};
}

void KvStorage::save_cell(uint32_t s, uint32_t cell, uint8_t* out) const {
  const Stream& st = streams_[s];
  for (uint32_t l = 0; l < n_layer(); ++l) {
    k(l, s).get_rows(cell, 1, out);
    out += st.k_row[l];
    v(l, s).get_rows(cell, 1, out);
    out += st.v_row[l];
  }
}

void KvStorage::restore_cell(uint32_t s, uint32_t cell, const uint8_t* in) {
  const Stream& st = streams_[s];
  for (uint32_t l = 0; l < n_layer(); ++l) {
    k(l, s).set_rows(cell, 1, in);
    in += st.k_row[l];
    v(l, s).set_rows(cell, 1, in);
    in += st.v_row[l];
  }
}

void KvStorage::copy_cell(uint32_t src_s, uint32_t src_cell, uint32_t dst_s, uint32_t dst_cell) {
  std::vector<float> tmp;
  std::vector<uint8_t> row_a, row_b;
  const uint32_t src_rot = rotation(src_s);
  const uint32_t dst_rot = rotation(dst_s);
  for (uint32_t l = 0; l < n_layer(); ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      const KvRows a = kind == 0 ? k(l, src_s) : v(l, src_s);
      const KvRows b = kind == 0 ? k(l, dst_s) : v(l, dst_s);
      row_a.resize(a.row_bytes);
      a.get_rows(src_cell, 1, row_a.data());
      if (a.type == b.type && src_rot == dst_rot) {
        b.set_rows(dst_cell, 1, row_a.data());
      } else {
        tmp.resize(a.n_embd);
        row_b.resize(b.row_bytes);
        // Types and rotations were validated at creation: the conversion exists.
        const Status st = kv_row_convert(a.type, src_rot, row_a.data(), b.type, dst_rot,
                                         row_b.data(), a.n_embd, tmp.data());
        CHECK(st.ok()) << st.to_string();
        b.set_rows(dst_cell, 1, row_b.data());
      }
    }
  }
}

Status KvStorage::replace_stream(uint32_t s, StreamTypes types) {
  CHECK(s < streams_.size());
  MNEMO_RETURN_IF_ERROR(check_types(layers_, s, types));
  // Map the new tensors before releasing the old ones: a refused mapping leaves the stream as
  // it was (the price is a peak of old + new bytes for this one stream).
  MNEMO_ASSIGN_OR_RETURN(Stream st, make_stream(n_cells_, layers_, types));
  streams_[s] = std::move(st);
  return Status();
}

size_t KvStorage::tensor_bytes(uint32_t l, uint32_t s, char kind) const {
  const Stream& st = streams_[s];
  return (kind == 'K' ? st.k_row[l] : st.v_row[l]) * n_cells_;
}

}  // namespace mnemo
