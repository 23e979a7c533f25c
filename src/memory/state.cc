// State files: the parts every memory shares (file header, HEAD, TOKN, DONE), the two-pass
// restore, and the buffer / file wrappers (include/mnemo/state.h, docs/formats/state.md).
#include "mnemo/state.h"

#include <memory>
#include <string>
#include <utility>

namespace mnemo {

namespace sf = state_format;

namespace {

std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

const char* scope_name(sf::Scope s) {
  return s == sf::Scope::kWhole ? "whole-memory" : "single-sequence";
}

const char* kind_name(sf::MemoryKindId k) {
  switch (k) {
    case sf::MemoryKindId::kNone:
      return "none";
    case sf::MemoryKindId::kAttention:
      return "attention (KV cache)";
    case sf::MemoryKindId::kSwa:
      return "sliding-window (SWA KV cache)";
    case sf::MemoryKindId::kRecurrent:
      return "recurrent";
    case sf::MemoryKindId::kHybrid:
      return "hybrid";
  }
  return "unknown";
}

Status check_fingerprint(const ModelFingerprint& fp) {
  if (fp.n_embd_k_gqa.size() != fp.n_embd_v_gqa.size() || fp.n_layer() > sf::kMaxLayers ||
      fp.arch.size() > sf::kMaxArchNameBytes) {
    return Status::invalid_argument("state: malformed model fingerprint");
  }
  return Status();
}

// HEAD payload: scope, seq_id, memory_kind, arch_len, arch, n_layer, n_layer x (k, v), hash.
Status write_head(StateWriter& w, const ModelFingerprint& fp, const StateWriteSpec& spec,
                  sf::MemoryKindId kind) {
  PayloadBuilder p;
  p.u32(static_cast<uint32_t>(spec.scope));
  p.i32(spec.scope == sf::Scope::kSequence ? spec.seq : -1);
  p.u32(static_cast<uint32_t>(kind));
  p.u32(static_cast<uint32_t>(fp.arch.size()));
  p.bytes(fp.arch.data(), fp.arch.size());
  p.u32(fp.n_layer());
  for (uint32_t il = 0; il < fp.n_layer(); ++il) {
    p.u32(fp.n_embd_k_gqa[il]);
    p.u32(fp.n_embd_v_gqa[il]);
  }
  p.u64(fp.hparams_hash);
  return w.write_section(sf::kTagHead, p.data());
}

Status read_head(StateReader& r, StateInfo* info) {
  MNEMO_RETURN_IF_ERROR(r.expect_section(sf::kTagHead).status());
  uint32_t scope = 0, kind = 0, arch_len = 0, n_layer = 0;
  MNEMO_RETURN_IF_ERROR(r.get_u32(&scope));
  MNEMO_RETURN_IF_ERROR(r.get_i32(&info->seq));
  MNEMO_RETURN_IF_ERROR(r.get_u32(&kind));
  if (scope != uint32_t(sf::Scope::kWhole) && scope != uint32_t(sf::Scope::kSequence)) {
    return r.corrupt("scope " + std::to_string(scope) + " is not 1 (whole) or 2 (sequence)");
  }
  info->scope = static_cast<sf::Scope>(scope);
  if (info->scope == sf::Scope::kSequence && (info->seq < 0 || uint32_t(info->seq) >= kMaxSeq)) {
    return r.corrupt("saved seq_id " + std::to_string(info->seq) + " is out of range");
  }
  if (kind < uint32_t(sf::MemoryKindId::kAttention) || kind > uint32_t(sf::MemoryKindId::kHybrid)) {
    return r.corrupt("memory kind " + std::to_string(kind) + " is unknown");
  }
  info->memory_kind = static_cast<sf::MemoryKindId>(kind);
  MNEMO_RETURN_IF_ERROR(r.get_u32(&arch_len));
  if (arch_len > sf::kMaxArchNameBytes) {
    return r.corrupt("architecture name of " + std::to_string(arch_len) + " bytes is too long");
  }
  info->model.arch.resize(arch_len);
  MNEMO_RETURN_IF_ERROR(r.get(info->model.arch.data(), arch_len));
  MNEMO_RETURN_IF_ERROR(r.get_u32(&n_layer));
  if (n_layer > sf::kMaxLayers || uint64_t(n_layer) * 8 > r.remaining()) {
    return r.corrupt("layer count " + std::to_string(n_layer) + " is implausible");
  }
  info->model.n_embd_k_gqa.resize(n_layer);
  info->model.n_embd_v_gqa.resize(n_layer);
  for (uint32_t il = 0; il < n_layer; ++il) {
    MNEMO_RETURN_IF_ERROR(r.get_u32(&info->model.n_embd_k_gqa[il]));
    MNEMO_RETURN_IF_ERROR(r.get_u32(&info->model.n_embd_v_gqa[il]));
  }
  MNEMO_RETURN_IF_ERROR(r.get_u64(&info->model.hparams_hash));
  return r.end_section();
}

// The first difference between the state's model and this one, as an error naming it.
Status compare_models(const ModelFingerprint& saved, const ModelFingerprint& mine) {
  auto differ = [](const std::string& what) {
    return Status::invalid_argument("state: written for a different model: " + what);
  };
  if (saved.arch != mine.arch) {
    return differ("architecture '" + saved.arch + "' (this model: '" + mine.arch + "')");
  }
  if (saved.n_layer() != mine.n_layer()) {
    return differ(std::to_string(saved.n_layer()) +
                  " layers (this model: " + std::to_string(mine.n_layer()) + ")");
  }
  for (uint32_t il = 0; il < saved.n_layer(); ++il) {
    if (saved.n_embd_k_gqa[il] != mine.n_embd_k_gqa[il] ||
        saved.n_embd_v_gqa[il] != mine.n_embd_v_gqa[il]) {
      return differ("layer " + std::to_string(il) + " K/V widths " +
                    std::to_string(saved.n_embd_k_gqa[il]) + "/" +
                    std::to_string(saved.n_embd_v_gqa[il]) +
                    " (this model: " + std::to_string(mine.n_embd_k_gqa[il]) + "/" +
                    std::to_string(mine.n_embd_v_gqa[il]) + ")");
    }
  }
  if (saved.hparams_hash != mine.hparams_hash) {
    return differ("hyper-parameter and tensor-shape hash " + hex64(saved.hparams_hash) +
                  " (this model: " + hex64(mine.hparams_hash) + ")");
  }
  return Status();
}

Status read_tokens(StateReader& r, std::vector<int32_t>* tokens) {
  MNEMO_RETURN_IF_ERROR(r.expect_section(sf::kTagTokens).status());
  uint64_t n = 0;
  MNEMO_RETURN_IF_ERROR(r.get_u64(&n));
  if (n > sf::kMaxTokens || n * 4 != r.remaining()) {
    return r.corrupt("token count " + std::to_string(n) + " does not match the section's " +
                     std::to_string(r.remaining()) + " remaining bytes");
  }
  tokens->resize(n);
  for (uint64_t i = 0; i < n; ++i) MNEMO_RETURN_IF_ERROR(r.get_i32(&(*tokens)[i]));
  return r.end_section();
}

}  // namespace

// --- streaming ---------------------------------------------------------------------------------

Status state_write(const Memory& mem, const ModelFingerprint& fp, StateSink* sink,
                   const StateWriteSpec& spec, std::span<const int32_t> tokens) {
  MNEMO_RETURN_IF_ERROR(check_fingerprint(fp));
  const sf::MemoryKindId kind = mem.state_kind();
  if (kind == sf::MemoryKindId::kNone) {
    return Status::not_supported("state: this memory cannot save its state");
  }
  if (spec.scope == sf::Scope::kSequence &&
      (spec.seq < 0 || uint32_t(spec.seq) >= mem.n_seq_max())) {
    return Status::invalid_argument(
        "state: seq_id " + std::to_string(spec.seq) +
        " is outside [0, n_seq_max = " + std::to_string(mem.n_seq_max()) + ")");
  }
  if (tokens.size() > sf::kMaxTokens) {
    return Status::invalid_argument("state: " + std::to_string(tokens.size()) +
                                    " tokens exceed the format's limit");
  }
  StateWriter w(sink);
  MNEMO_RETURN_IF_ERROR(w.write_file_header());
  MNEMO_RETURN_IF_ERROR(write_head(w, fp, spec, kind));
  MNEMO_RETURN_IF_ERROR(mem.state_write(w, spec));
  MNEMO_RETURN_IF_ERROR(w.begin_section(sf::kTagTokens, 8 + 4 * uint64_t(tokens.size())));
  MNEMO_RETURN_IF_ERROR(w.put_u64(tokens.size()));
  for (int32_t t : tokens) MNEMO_RETURN_IF_ERROR(w.put_i32(t));
  MNEMO_RETURN_IF_ERROR(w.end_section());
  return w.write_section(sf::kTagDone, {});
}

Result<StateInfo> state_inspect(StateSource* source) {
  StateReader r(source);
  StateInfo info;
  MNEMO_ASSIGN_OR_RETURN(info.version, r.read_file_header());
  MNEMO_RETURN_IF_ERROR(read_head(r, &info));
  info.bytes = source->size();
  return info;
}

Result<StateInfo> state_inspect_tokens(StateSource* source, std::vector<int32_t>* tokens) {
  StateReader r(source);
  StateInfo info;
  MNEMO_ASSIGN_OR_RETURN(info.version, r.read_file_header());
  MNEMO_RETURN_IF_ERROR(read_head(r, &info));
  info.bytes = source->size();
  // Step over the memory's parts without hashing them (a skip is a seek), then read TOKN again
  // from its start with verification on.
  r.set_verify(false);
  while (true) {
    MNEMO_ASSIGN_OR_RETURN(StateReader::Section sec, r.begin_section());
    if (sec.tag == sf::kTagTokens) {
      MNEMO_RETURN_IF_ERROR(r.seek(sec.offset));
      break;
    }
    if (sec.tag == sf::kTagDone) return r.corrupt("the state has no token list");
    MNEMO_RETURN_IF_ERROR(r.skip(sec.length));
    MNEMO_RETURN_IF_ERROR(r.end_section());
  }
  r.set_verify(true);
  MNEMO_RETURN_IF_ERROR(read_tokens(r, tokens));
  MNEMO_RETURN_IF_ERROR(r.expect_section(sf::kTagDone).status());
  MNEMO_RETURN_IF_ERROR(r.end_section());
  if (r.offset() != r.source_size()) {
    return Status::corruption("state: unexpected bytes after the end marker at offset " +
                              std::to_string(r.offset()));
  }
  return info;
}

Status state_verify(StateSource* source) {
  StateReader r(source);
  MNEMO_RETURN_IF_ERROR(r.read_file_header().status());
  while (true) {
    MNEMO_ASSIGN_OR_RETURN(StateReader::Section sec, r.begin_section());
    MNEMO_RETURN_IF_ERROR(r.skip(sec.length));
    MNEMO_RETURN_IF_ERROR(r.end_section());
    if (sec.tag == sf::kTagDone) break;
  }
  if (r.offset() != r.source_size()) {
    return Status::corruption("state: unexpected bytes after the end marker at offset " +
                              std::to_string(r.offset()));
  }
  return Status();
}

Result<std::vector<int32_t>> state_read(Memory& mem, const ModelFingerprint& fp,
                                        StateSource* source, sf::Scope scope, SeqId dst_seq,
                                        const StateSeqCheck& check) {
  MNEMO_RETURN_IF_ERROR(check_fingerprint(fp));
  const sf::MemoryKindId kind = mem.state_kind();
  if (kind == sf::MemoryKindId::kNone) {
    return Status::not_supported("state: this memory cannot restore a state");
  }
  if (scope == sf::Scope::kSequence && (dst_seq < 0 || uint32_t(dst_seq) >= mem.n_seq_max())) {
    return Status::invalid_argument(
        "state: destination seq_id " + std::to_string(dst_seq) +
        " is outside [0, n_seq_max = " + std::to_string(mem.n_seq_max()) + ")");
  }
  StateReader r(source);
  StateInfo info;
  MNEMO_ASSIGN_OR_RETURN(info.version, r.read_file_header());
  MNEMO_RETURN_IF_ERROR(read_head(r, &info));
  if (info.scope != scope) {
    return Status::invalid_argument(
        std::string("state: this is a ") + scope_name(info.scope) + " state; restore it with " +
        (info.scope == sf::Scope::kWhole ? "state_set_data / state_load_file"
                                         : "state_seq_set_data / state_seq_load_file"));
  }
  if (info.memory_kind != kind) {
    return Status::not_supported(std::string("state: written by a ") + kind_name(info.memory_kind) +
                                 " memory; this memory is " + kind_name(kind));
  }
  MNEMO_RETURN_IF_ERROR(compare_models(info.model, fp));

  // Pass 1: validate everything; nothing changes.
  StateReadSpec spec;
  spec.scope = scope;
  spec.src_seq = info.seq;
  spec.dst_seq = dst_seq;
  spec.dry_run = true;
  StateSeqSummary summary;
  if (scope == sf::Scope::kSequence) spec.summary = &summary;
  const uint64_t parts_offset = r.offset();
  MNEMO_RETURN_IF_ERROR(mem.state_read(r, spec));
  std::vector<int32_t> tokens;
  MNEMO_RETURN_IF_ERROR(read_tokens(r, &tokens));
  MNEMO_RETURN_IF_ERROR(r.expect_section(sf::kTagDone).status());
  MNEMO_RETURN_IF_ERROR(r.end_section());
  if (r.offset() != r.source_size()) {
    return Status::corruption("state: " + std::to_string(r.source_size() - r.offset()) +
                              " unexpected bytes after the end marker at offset " +
                              std::to_string(r.offset()));
  }
  if (check && scope == sf::Scope::kSequence) MNEMO_RETURN_IF_ERROR(check(tokens, summary));

  // Pass 2: apply. A stable source (a caller's buffer) was verified already.
  MNEMO_RETURN_IF_ERROR(r.seek(parts_offset));
  r.set_verify(!source->stable());
  spec.dry_run = false;
  spec.summary = nullptr;
  Status st = mem.state_read(r, spec);
  if (!st.ok()) {
    return st.with_context("state changed while it was being restored; the destination " +
                           std::string(scope == sf::Scope::kWhole ? "memory" : "sequence") +
                           " was emptied");
  }
  return tokens;
}

// --- buffers and files -------------------------------------------------------------------------

namespace {

Result<size_t> get_size(const Memory& mem, const ModelFingerprint& fp, const StateWriteSpec& s) {
  CountingSink sink;
  MNEMO_RETURN_IF_ERROR(state_write(mem, fp, &sink, s, {}));
  return static_cast<size_t>(sink.bytes());
}

Result<size_t> get_data(const Memory& mem, const ModelFingerprint& fp, const StateWriteSpec& s,
                        std::span<uint8_t> dst) {
  SpanSink sink(dst);
  MNEMO_RETURN_IF_ERROR(state_write(mem, fp, &sink, s, {}));
  return sink.size();
}

Status save_file(const Memory& mem, const ModelFingerprint& fp, const StateWriteSpec& s,
                 const std::string& path, std::span<const int32_t> tokens) {
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<FileSink> sink, FileSink::create(path));
  MNEMO_RETURN_IF_ERROR(state_write(mem, fp, sink.get(), s, tokens));
  return sink->commit();
}

Result<std::vector<int32_t>> load_file(Memory& mem, const ModelFingerprint& fp,
                                       const std::string& path, sf::Scope scope, SeqId dst,
                                       const StateSeqCheck& check = {}) {
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<FileSource> src, FileSource::open(path));
  Result<std::vector<int32_t>> r = state_read(mem, fp, src.get(), scope, dst, check);
  if (!r.ok()) return r.status().with_context(path);
  return r;
}

StateWriteSpec whole() {
  return StateWriteSpec{.scope = sf::Scope::kWhole, .seq = -1, .k_type = {}, .v_type = {}};
}
StateWriteSpec one(SeqId seq) {
  return StateWriteSpec{.scope = sf::Scope::kSequence, .seq = seq, .k_type = {}, .v_type = {}};
}

}  // namespace

Result<size_t> state_get_size(const Memory& mem, const ModelFingerprint& fp) {
  return get_size(mem, fp, whole());
}

Result<size_t> state_get_data(const Memory& mem, const ModelFingerprint& fp,
                              std::span<uint8_t> dst) {
  return get_data(mem, fp, whole(), dst);
}

Status state_set_data(Memory& mem, const ModelFingerprint& fp, std::span<const uint8_t> src) {
  SpanSource source(src);
  return state_read(mem, fp, &source, sf::Scope::kWhole, -1).status();
}

Status state_save_file(const Memory& mem, const ModelFingerprint& fp, const std::string& path,
                       std::span<const int32_t> tokens) {
  return save_file(mem, fp, whole(), path, tokens);
}

Result<std::vector<int32_t>> state_load_file(Memory& mem, const ModelFingerprint& fp,
                                             const std::string& path) {
  return load_file(mem, fp, path, sf::Scope::kWhole, -1);
}

Result<size_t> state_seq_get_size(const Memory& mem, const ModelFingerprint& fp, SeqId seq) {
  return get_size(mem, fp, one(seq));
}

Result<size_t> state_seq_get_data(const Memory& mem, const ModelFingerprint& fp, SeqId seq,
                                  std::span<uint8_t> dst) {
  return get_data(mem, fp, one(seq), dst);
}

Status state_seq_set_data(Memory& mem, const ModelFingerprint& fp, std::span<const uint8_t> src,
                          SeqId dst_seq) {
  SpanSource source(src);
  return state_read(mem, fp, &source, sf::Scope::kSequence, dst_seq).status();
}

Status state_seq_save_file(const Memory& mem, const ModelFingerprint& fp, const std::string& path,
                           SeqId seq, std::span<const int32_t> tokens) {
  return save_file(mem, fp, one(seq), path, tokens);
}

Result<std::vector<int32_t>> state_seq_load_file(Memory& mem, const ModelFingerprint& fp,
                                                 const std::string& path, SeqId dst_seq,
                                                 const StateSeqCheck& check) {
  return load_file(mem, fp, path, sf::Scope::kSequence, dst_seq, check);
}

}  // namespace mnemo
