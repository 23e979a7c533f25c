// State save / restore of KV caches at the memory level (no model): round trips across modes,
// seq_ids, n_ctx and K/V types (with and without rotation), SWA windows, tokens and files,
// sizes, scope / model / kind mismatches, the committed v1 fixtures, and a source that changes
// between the two passes of a restore.
#include "mnemo/state.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "memory/kv_rotation.h"
#include "mnemo/state_format.h"
#include "support/file_limit.h"
#include "support/state_test_util.h"

namespace mnemo {
namespace {

using namespace testing;  // NOLINT(build/namespaces): support/state_test_util.h's helpers

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/mnemo_state_" + std::to_string(::getpid()) + "_" + name;
}

// --- round trips -------------------------------------------------------------------------------

class ModePairs : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

// A sequence with a pending shift, saved from one mode and restored into another seq_id of the
// other mode, replacing what that sequence held: identical positions, shifts and row bytes; the
// other sequences of the destination are untouched.
TEST_P(ModePairs, SequenceIntoAnotherSeqId) {
  const auto [src_unified, dst_unified] = GetParam();
  auto src = make_cache(state_config(64, 3, src_unified));
  fill(*src, 0, 10, 1);
  fill(*src, 1, 17, 2);
  fill(*src, 2, 5, 3);
  ASSERT_TRUE(src->seq_add(1, 10, -1, 3).ok());  // pending shift on part of seq 1
  const std::vector<uint8_t> state = save_seq(*src, 1);

  auto dst = make_cache(state_config(64, 3, dst_unified));
  fill(*dst, 0, 6, 8);
  fill(*dst, 2, 9, 9);
  const auto other_before = seq_bytes(*dst, 2);
  ASSERT_TRUE(state_seq_set_data(*dst, test_fingerprint(), state, 0).ok());
  EXPECT_EQ(seq_bytes(*dst, 0), seq_bytes(*src, 1));
  EXPECT_EQ(seq_bytes(*dst, 2), other_before);
  EXPECT_EQ(dst->seq_pos_max(1), -1);
  EXPECT_EQ(dst->seq_pos_min(0), 0);
  EXPECT_EQ(dst->seq_pos_max(0), 19);

  // The restored shifts are pending: init_update lists the 7 shifted cells with delta 3.
  auto upd = dst->init_update();
  ASSERT_EQ(upd->status(), MemoryStatus::kSuccess);
  const auto& shifts = static_cast<const KvCacheContext&>(*upd).shifts();
  size_t n_shifted = 0;
  for (const auto& sh : shifts) {
    for (int32_t d : sh.deltas) EXPECT_EQ(d, 3);
    n_shifted += sh.cells.size();
  }
  EXPECT_EQ(n_shifted, 7u);

  // Later requests on the restored sequence work: it continues at position 20.
  fill(*dst, 0, 4, 10);
  EXPECT_EQ(dst->seq_pos_max(0), 23);
}

// The whole memory, including a prefix shared by two sequences in a unified cache.
TEST_P(ModePairs, WholeMemory) {
  const auto [src_unified, dst_unified] = GetParam();
  auto src = make_cache(state_config(64, 3, src_unified));
  fill(*src, 0, 12, 1);
  ASSERT_TRUE(src->seq_cp(0, 1, 0, 5).ok());  // unified: shared cells; split: copies
  fill(*src, 1, 4, 2);
  fill(*src, 2, 7, 3);
  const std::vector<uint8_t> state = save_whole(*src);

  auto dst = make_cache(state_config(64, 3, dst_unified));
  fill(*dst, 0, 30, 7);  // replaced entirely
  ASSERT_TRUE(state_set_data(*dst, test_fingerprint(), state).ok());
  for (SeqId s = 0; s < 3; ++s) EXPECT_EQ(seq_bytes(*dst, s), seq_bytes(*src, s)) << "seq " << s;
  if (src_unified && dst_unified) {
    EXPECT_EQ(dst->cells(0).used(), src->cells(0).used());  // still shared, not duplicated
  }
  // Saving the restored memory again gives the same bytes when the geometry is the same.
  if (src_unified == dst_unified) {
    EXPECT_EQ(save_whole(*dst), state);
  }
}

INSTANTIATE_TEST_SUITE_P(State, ModePairs,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(StateTest, EmptySequenceRestoresToEmpty) {
  auto src = make_cache(state_config(32, 2, false));
  fill(*src, 0, 5, 1);
  const std::vector<uint8_t> state = save_seq(*src, 1);
  auto dst = make_cache(state_config(32, 2, false));
  fill(*dst, 1, 9, 2);
  ASSERT_TRUE(state_seq_set_data(*dst, test_fingerprint(), state, 1).ok());
  EXPECT_EQ(dst->seq_pos_max(1), -1);
  EXPECT_EQ(dst->cells(1).used(), 0u);
}

// V planes are a layout in memory only: a cache keeping V as rows and one keeping V planes write
// the same state bytes for the same contents, and each restores the other's file exactly (f16
// copies, and q8_0 with rotation through the converting path).
TEST(StateTest, VPlanesAndRowsWriteAndReadTheSameFiles) {
  for (const auto& [type, rot] : {std::pair{GgmlType::F16, 0u}, std::pair{GgmlType::Q8_0, kHead}}) {
    KvCacheConfig rows_cfg = state_config(64, 2, false, type, type, rot);
    rows_cfg.head_dim_v = 0;
    const KvCacheConfig planes_cfg = state_config(64, 2, false, type, type, rot);
    auto rows = make_cache(rows_cfg);
    auto planes = make_cache(planes_cfg);
    ASSERT_TRUE(planes->storage().v(0, 0).n_seg == 2 && rows->storage().v(0, 0).n_seg == 1);
    fill(*rows, 0, 21, 3);
    fill(*planes, 0, 21, 3);
    EXPECT_EQ(seq_bytes(*rows, 0), seq_bytes(*planes, 0));
    const std::vector<uint8_t> from_rows = save_seq(*rows, 0);
    EXPECT_EQ(save_seq(*planes, 0), from_rows);
    // Into the other layout, and into another type (converted row by row).
    auto planes2 = make_cache(planes_cfg);
    ASSERT_TRUE(state_seq_set_data(*planes2, test_fingerprint(), from_rows, 1).ok());
    EXPECT_EQ(seq_bytes(*planes2, 1), seq_bytes(*rows, 0));
    auto rows2 = make_cache(rows_cfg);
    ASSERT_TRUE(state_seq_set_data(*rows2, test_fingerprint(), save_seq(*planes, 0), 1).ok());
    EXPECT_EQ(seq_bytes(*rows2, 1), seq_bytes(*planes, 0));
    KvCacheConfig other = planes_cfg;
    other.k_type = other.v_type = type == GgmlType::F16 ? GgmlType::F32 : GgmlType::F16;
    other.rotation_dim = 0;
    auto converted = make_cache(other);
    ASSERT_TRUE(state_seq_set_data(*converted, test_fingerprint(), from_rows, 0).ok());
    KvCacheConfig other_rows = other;
    other_rows.head_dim_v = 0;
    auto converted_rows = make_cache(other_rows);
    ASSERT_TRUE(state_seq_set_data(*converted_rows, test_fingerprint(), from_rows, 0).ok());
    EXPECT_EQ(seq_bytes(*converted, 0), seq_bytes(*converted_rows, 0));
  }
}

TEST(StateTest, SmallerAndLargerContexts) {
  auto src = make_cache(state_config(64, 1, false));
  fill(*src, 0, 20, 1);
  const std::vector<uint8_t> state = save_seq(*src, 0);
  for (uint32_t n_ctx : {20u, 24u, 128u}) {
    auto dst = make_cache(state_config(n_ctx, 1, false));
    ASSERT_TRUE(state_seq_set_data(*dst, test_fingerprint(), state, 0).ok()) << n_ctx;
    EXPECT_EQ(seq_bytes(*dst, 0), seq_bytes(*src, 0));
  }
  auto small = make_cache(state_config(16, 2, false));
  fill(*small, 0, 3, 5);
  fill(*small, 1, 7, 6);
  const std::string before = full_snapshot(*small);
  Status st = state_seq_set_data(*small, test_fingerprint(), state, 0);
  EXPECT_EQ(st.code(), StatusCode::kNoSpace) << st.to_string();
  EXPECT_NE(st.message().find("restoring 20 cells into seq_id 0"), std::string::npos)
      << st.message();
  EXPECT_EQ(full_snapshot(*small), before);
}

// The destination sequence's own cells count as room (it is being replaced), but cells it shares
// with another sequence do not.
TEST(StateTest, DestinationCellsAreReused) {
  auto src = make_cache(state_config(32, 2, false));
  fill(*src, 0, 20, 1);
  const std::vector<uint8_t> state = save_seq(*src, 0);
  auto dst = make_cache(state_config(24, 2, false));
  fill(*dst, 0, 20, 2);  // 4 cells free: room only with seq 0's own 20
  ASSERT_TRUE(state_seq_set_data(*dst, test_fingerprint(), state, 0).ok());
  EXPECT_EQ(seq_bytes(*dst, 0), seq_bytes(*src, 0));

  auto uni = make_cache(state_config(24, 2, true));
  fill(*uni, 0, 20, 3);
  ASSERT_TRUE(uni->seq_cp(0, 1, -1, -1).ok());  // every cell shared with seq 1
  const std::string before = full_snapshot(*uni);
  EXPECT_EQ(state_seq_set_data(*uni, test_fingerprint(), state, 0).code(), StatusCode::kNoSpace);
  EXPECT_EQ(full_snapshot(*uni), before);
}

TEST(StateTest, WholeMemorySeqIdsMustFit) {
  auto src = make_cache(state_config(16, 4, false));
  fill(*src, 3, 2, 1);
  const std::vector<uint8_t> state = save_whole(*src);
  auto dst = make_cache(state_config(16, 2, false));
  fill(*dst, 1, 3, 2);
  const std::string before = full_snapshot(*dst);
  Status st = state_set_data(*dst, test_fingerprint(), state);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("seq_id 3"), std::string::npos) << st.message();
  EXPECT_EQ(full_snapshot(*dst), before);
}

// --- K/V type conversion -----------------------------------------------------------------------

const GgmlType kKvTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                             GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                             GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL};

// Worst relative RMS error of one quantization of kv_value rows (outlier channels included),
// measured over 39 generations of 6 cells, times 1.3. Rotation spreads the outliers over the
// head and cuts the 4-bit errors by more than half.
double quant_tol(GgmlType t, bool rotated) {
  switch (t) {
    case GgmlType::F32:
      return 1e-6;
    case GgmlType::F16:
      return 4e-4;
    case GgmlType::BF16:
      return 3.3e-3;
    case GgmlType::Q8_0:
      return rotated ? 0.0075 : 0.016;
    case GgmlType::Q4_0:
      return rotated ? 0.12 : 0.31;
    case GgmlType::Q4_1:
      return rotated ? 0.10 : 0.16;
    case GgmlType::Q5_0:
      return rotated ? 0.057 : 0.133;
    case GgmlType::Q5_1:
      return rotated ? 0.049 : 0.074;
    default:
      return rotated ? 0.114 : 0.19;  // iq4_nl
  }
}

// Every ordered pair of the nine K/V types, with rotation on (quantized streams rotated) and
// off: the restored values (dequantized, un-rotated with the explicit Hadamard matrix) match the
// generator within one quantization of each type; a same-format pair is byte-exact.
TEST(StateTest, TypeConversionAllPairs) {
  for (uint32_t rot : {0u, testing::kHead}) {
    for (GgmlType a : kKvTypes) {
      auto src = make_cache(state_config(16, 1, false, a, a, rot));
      fill(*src, 0, 6, 4);
      const std::vector<uint8_t> state = save_seq(*src, 0);
      for (GgmlType b : kKvTypes) {
        auto dst = make_cache(state_config(16, 2, false, b, b, rot));
        ASSERT_TRUE(state_seq_set_data(*dst, test_fingerprint(), state, 1).ok());
        const std::string what = std::string(type_name(a)) + " -> " + std::string(type_name(b)) +
                                 " rotation " + std::to_string(rot);
        if (a == b) {
          EXPECT_EQ(seq_bytes(*dst, 1), seq_bytes(*src, 0)) << what;
        }
        const auto vals = testing::seq_values(*dst, 1);
        ASSERT_EQ(vals.size(), 6u) << what;
        for (uint32_t i = 0; i < 6; ++i) {
          const double err =
              testing::rel_rms(vals[i], testing::ref_cell_values(testing::make_tag(4, i)));
          EXPECT_LE(err, quant_tol(a, rot != 0) + quant_tol(b, rot != 0)) << what << " cell " << i;
        }
      }
    }
  }
}

// A state written converted (StateWriteSpec k_type / v_type) holds exactly the rows a restore
// of the unconverted state into a cache of those types writes (same conversion, other end), and
// restores into a cache of those types byte for byte; the source cache is not changed.
TEST(StateTest, ConvertingWriteEqualsConvertingRestore) {
  for (uint32_t rot : {0u, testing::kHead}) {
    auto src = make_cache(state_config(16, 1, false, GgmlType::F16, GgmlType::F16, rot));
    fill(*src, 0, 6, 4);
    const std::string before = full_snapshot(*src);
    for (auto [k, v] :
         {std::pair{GgmlType::Q8_0, GgmlType::Q8_0}, std::pair{GgmlType::Q4_0, GgmlType::F16},
          std::pair{GgmlType::F32, GgmlType::BF16}}) {
      const std::string what = std::string(type_name(k)) + "/" + std::string(type_name(v)) +
                               " rotation " + std::to_string(rot);
      StateWriteSpec spec;
      spec.scope = state_format::Scope::kSequence;
      spec.seq = 0;
      spec.k_type = k;
      spec.v_type = v;
      std::vector<uint8_t> converted;
      VectorSink sink(&converted);
      ASSERT_TRUE(state_write(*src, test_fingerprint(), &sink, spec, {}).ok()) << what;
      CountingSink count;
      ASSERT_TRUE(state_write(*src, test_fingerprint(), &count, spec, {}).ok());
      EXPECT_EQ(count.bytes(), converted.size()) << what;
      EXPECT_EQ(full_snapshot(*src), before) << what;

      auto via_write = make_cache(state_config(16, 1, false, k, v, rot));
      ASSERT_TRUE(state_seq_set_data(*via_write, test_fingerprint(), converted, 0).ok()) << what;
      auto via_read = make_cache(state_config(16, 1, false, k, v, rot));
      ASSERT_TRUE(state_seq_set_data(*via_read, test_fingerprint(), save_seq(*src, 0), 0).ok());
      EXPECT_EQ(seq_bytes(*via_write, 0), seq_bytes(*via_read, 0)) << what;
    }
  }
  auto src = make_cache(state_config(16, 1, false));
  StateWriteSpec bad;
  bad.scope = state_format::Scope::kSequence;
  bad.seq = 0;
  bad.k_type = GgmlType::Q4_K;  // a weight type, not a K/V cache type
  CountingSink count;
  EXPECT_EQ(state_write(*src, test_fingerprint(), &count, bad, {}).code(),
            StatusCode::kInvalidArgument);
}

// A state written with rotated rows restored into a cache without rotation (and the reverse)
// un-rotates (rotates) the rows: the seed PR's "f16 -> q8_0 broken with rotation" bug.
TEST(StateTest, RotationIsConvertedOnRestore) {
  auto src = make_cache(state_config(16, 1, false, GgmlType::Q8_0, GgmlType::Q8_0, 32));
  ASSERT_EQ(src->storage().rotation(0), 32u);
  fill(*src, 0, 5, 6);
  const std::vector<uint8_t> rotated = save_seq(*src, 0);
  for (auto [type, rot] : {std::pair{GgmlType::Q8_0, 0u}, std::pair{GgmlType::F16, 32u},
                           std::pair{GgmlType::Q4_0, 0u}}) {
    auto dst = make_cache(state_config(16, 1, false, type, type, rot));
    ASSERT_TRUE(state_seq_set_data(*dst, test_fingerprint(), rotated, 0).ok());
    const auto vals = testing::seq_values(*dst, 0);
    for (uint32_t i = 0; i < 5; ++i) {
      EXPECT_LE(testing::rel_rms(vals[i], testing::ref_cell_values(testing::make_tag(6, i))),
                quant_tol(GgmlType::Q8_0, true) + quant_tol(type, rot != 0))
          << type_name(type) << " cell " << i;
    }
  }
}

// --- sliding-window caches ---------------------------------------------------------------------

SwaKvCacheConfig swa_config(uint32_t n_seq_max, bool unified) {
  return swa_state_config(64, n_seq_max, unified);
}

std::unique_ptr<SwaKvCache> make_swa(const SwaKvCacheConfig& c) {
  return create_or_die<SwaKvCache>(c);
}

// Both children travel: the SWA child keeps every cell it actually holds, also those behind the
// window that were not reused yet (llama.cpp #25295 lost them).
TEST(StateTest, SwaKeepsTheWholeHeldWindow) {
  auto src = make_swa(swa_config(1, false));
  for (int i = 0; i < 3; ++i) fill(*src, 0, 10, 1 + i);
  const uint32_t held = src->swa().cells(0).seq_n_cells(0);
  ASSERT_GT(held, 8u);
  const std::vector<uint8_t> state = save_seq(*src, 0);

  auto dst = make_swa(swa_config(2, false));
  fill(*dst, 1, 4, 9);
  ASSERT_TRUE(state_seq_set_data(*dst, test_fingerprint(), state, 1).ok());
  EXPECT_EQ(seq_bytes(dst->base(), 1), seq_bytes(src->base(), 0));
  EXPECT_EQ(seq_bytes(dst->swa(), 1), seq_bytes(src->swa(), 0));
  EXPECT_EQ(dst->seq_pos_min(1), src->seq_pos_min(0));
  EXPECT_EQ(dst->seq_pos_max(1), 29);
  fill(*dst, 1, 10, 12);  // and it continues
  EXPECT_EQ(dst->seq_pos_max(1), 39);

  // A whole-memory state of an SWA cache into a plain KV cache: a different kind of memory.
  auto kv = make_cache(state_config(64, 1, false));
  const std::string before = full_snapshot(*kv);
  Status st = state_set_data(*kv, test_fingerprint(), save_whole(*src));
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_EQ(full_snapshot(*kv), before);
}

TEST(StateTest, SwaWholeAcrossModes) {
  auto src = make_swa(swa_config(2, true));
  fill(*src, 0, 20, 1);
  fill(*src, 1, 12, 2);
  const std::vector<uint8_t> state = save_whole(*src);
  auto dst = make_swa(swa_config(2, false));
  ASSERT_TRUE(state_set_data(*dst, test_fingerprint(), state).ok());
  for (SeqId s = 0; s < 2; ++s) {
    EXPECT_EQ(seq_bytes(dst->base(), s), seq_bytes(src->base(), s));
    EXPECT_EQ(seq_bytes(dst->swa(), s), seq_bytes(src->swa(), s));
  }
}

// --- carriers, sizes, mismatches ---------------------------------------------------------------

TEST(StateTest, FilesCarryTokensAndMissingFilesChangeNothing) {
  auto src = make_cache(state_config(32, 2, false));
  fill(*src, 1, 8, 3);
  const std::vector<int32_t> tokens = {5, 17, 42, 7, 7, 1, 0, 99};
  const std::string path = temp_path("seq.mnst");
  ASSERT_TRUE(state_seq_save_file(*src, test_fingerprint(), path, 1, tokens).ok());
  auto dst = make_cache(state_config(32, 2, true));
  fill(*dst, 0, 3, 4);
  Result<std::vector<int32_t>> got = state_seq_load_file(*dst, test_fingerprint(), path, 0);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, tokens);
  EXPECT_EQ(seq_bytes(*dst, 0), seq_bytes(*src, 1));

  const std::string whole = temp_path("whole.mnst");
  ASSERT_TRUE(state_save_file(*src, test_fingerprint(), whole, tokens).ok());
  auto dst2 = make_cache(state_config(32, 2, false));
  got = state_load_file(*dst2, test_fingerprint(), whole);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, tokens);

  const std::string before = full_snapshot(*dst);
  got = state_seq_load_file(*dst, test_fingerprint(), temp_path("missing.mnst"), 0);
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << got.status().to_string();
  EXPECT_EQ(full_snapshot(*dst), before);
  Status st = state_seq_save_file(*src, test_fingerprint(), "/nonexistent-dir/x.mnst", 1, tokens);
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.to_string();
  std::remove(path.c_str());
  std::remove(whole.c_str());
}

// A save that fails part way (the disk fills: the process may write no file above 4 KiB) leaves
// no file and no temporary behind, and an older file of the same name byte-equal.
TEST(StateTest, FailedSaveLeavesNoFileBehind) {
  auto src = make_cache(state_config(64, 2, false));
  fill(*src, 1, 48, 3);
  const std::vector<int32_t> tokens(48, 5);
  const std::string path = temp_path("full-disk.mnst");
  const std::string older = "an older save of this name";
  std::ofstream(path, std::ios::binary) << older;
  rlimit old;
  ASSERT_NO_FATAL_FAILURE(testing::limit_file_size(4096, &old));
  const Status st = state_seq_save_file(*src, test_fingerprint(), path, 1, tokens);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.to_string();
  std::ifstream in(path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), older);
  const std::string dir = path.substr(0, path.rfind('/'));
  const std::string stem = path.substr(path.rfind('/') + 1) + ".tmp.";
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    EXPECT_NE(f.path().filename().string().rfind(stem, 0), 0u) << "left behind: " << f.path();
  }
  // Unlimited again, the same save succeeds.
  ASSERT_TRUE(state_seq_save_file(*src, test_fingerprint(), path, 1, tokens).ok());
  std::remove(path.c_str());
}

TEST(StateTest, SizesAndBuffers) {
  auto m = make_cache(state_config(32, 2, false));
  fill(*m, 0, 9, 1);
  const std::vector<uint8_t> state = save_seq(*m, 0);
  // 16 header + HEAD + KVPT + KVCL + 2 KVLY + TOKN + DONE; rows: 9 cells x (64+64+128+64) x 2.
  EXPECT_GT(state.size(), 9u * 320 * 2);
  EXPECT_LT(state.size(), 9u * 320 * 2 + 1024);
  std::vector<uint8_t> small(state.size() - 1);
  Result<size_t> r = state_seq_get_data(*m, test_fingerprint(), 0, small);
  EXPECT_EQ(r.status().code(), StatusCode::kNoSpace);
  EXPECT_EQ(state_seq_get_size(*m, test_fingerprint(), 2).status().code(),
            StatusCode::kInvalidArgument);
  // Deterministic: the same memory gives the same bytes.
  EXPECT_EQ(save_seq(*m, 0), state);
}

TEST(StateTest, ScopeMismatchesAreRefused) {
  auto m = make_cache(state_config(32, 2, false));
  fill(*m, 0, 4, 1);
  const std::string before = full_snapshot(*m);
  Status a = state_set_data(*m, test_fingerprint(), save_seq(*m, 0));
  EXPECT_EQ(a.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.message().find("state_seq_set_data"), std::string::npos) << a.message();
  Status b = state_seq_set_data(*m, test_fingerprint(), save_whole(*m), 1);
  EXPECT_EQ(b.code(), StatusCode::kInvalidArgument);
  Status c = state_seq_set_data(*m, test_fingerprint(), save_seq(*m, 0), 2);
  EXPECT_EQ(c.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(full_snapshot(*m), before);
}

TEST(StateTest, WrongModelIsNamed) {
  auto m = make_cache(state_config(32, 1, false));
  fill(*m, 0, 4, 1);
  const std::vector<uint8_t> state = save_seq(*m, 0);
  struct Case {
    ModelFingerprint fp;
    std::string says;
  };
  std::vector<Case> cases;
  ModelFingerprint fp = test_fingerprint();
  fp.arch = "gemma3";
  cases.push_back({fp, "architecture 'test' (this model: 'gemma3')"});
  fp = test_fingerprint();
  fp.n_embd_k_gqa.push_back(64);
  fp.n_embd_v_gqa.push_back(64);
  cases.push_back({fp, "2 layers (this model: 3)"});
  fp = test_fingerprint();
  fp.n_embd_k_gqa[1] = 64;
  cases.push_back({fp, "layer 1 K/V widths 128/64 (this model: 64/64)"});
  fp = test_fingerprint();
  fp.hparams_hash ^= 1;
  cases.push_back({fp, "hash"});
  for (const Case& c : cases) {
    const std::string before = full_snapshot(*m);
    Status st = state_seq_set_data(*m, c.fp, state, 0);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
    EXPECT_EQ(full_snapshot(*m), before);
  }
}

// --- format compatibility: the committed fixture of every version ------------------------------

// The fixtures are written by this test when MNEMO_WRITE_FIXTURES=1 (only when a new version is
// introduced); otherwise they are read: the current writer must still produce them byte for byte
// while kVersion is theirs, and every reader must restore them.
struct Fixture {
  const char* file;
  uint32_t version;
};
const Fixture kFixtures[] = {{"v1_seq_kv.mnst", 1}, {"v1_whole_swa_q8.mnst", 1}};

std::string fixture_path(const char* file) {
  const char* src = std::getenv("MNEMO_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/fixtures/state/" + file;
}

// The memories the fixtures were made from (byte patterns of the fake model; no floats).
std::unique_ptr<Memory> fixture_memory(int which, bool fill_it) {
  if (which == 0) {
    auto m = make_cache(state_config(16, 2, false));
    if (fill_it) {
      fill(*m, 1, 6, 1, /*real=*/false);
      CHECK(m->seq_add(1, 4, -1, 2).ok());
    }
    return m;
  }
  SwaKvCacheConfig c = swa_config(2, true);
  c.kv.k_type = c.kv.v_type = GgmlType::Q8_0;
  c.kv.rotation_dim = 32;
  c.kv.n_ctx = 24;
  auto m = make_swa(c);
  if (fill_it) {
    fill(*m, 0, 12, 2, false);
    fill(*m, 1, 3, 3, false);
  }
  return m;
}

std::vector<uint8_t> write_fixture(int which, const Memory& m) {
  const std::vector<int32_t> tokens = {1, 2, 3, 500 + which};
  std::vector<uint8_t> out;
  VectorSink sink(&out);
  StateWriteSpec spec;
  spec.scope = which == 0 ? state_format::Scope::kSequence : state_format::Scope::kWhole;
  spec.seq = which == 0 ? 1 : -1;
  CHECK(state_write(m, test_fingerprint(), &sink, spec, tokens).ok());
  return out;
}

TEST(StateTest, FixturesOfEveryVersionRestore) {
  for (int which = 0; which < 2; ++which) {
    const Fixture& fx = kFixtures[which];
    auto m = fixture_memory(which, true);
    const std::vector<uint8_t> fresh = write_fixture(which, *m);
    const std::string path = fixture_path(fx.file);
    if (std::getenv("MNEMO_WRITE_FIXTURES") != nullptr) {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(fresh.data()), std::streamsize(fresh.size()));
    }
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in.good()) << "missing fixture " << path;
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    SpanSource src(bytes);
    Result<StateInfo> info = state_inspect(&src);
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    EXPECT_EQ(info->version, fx.version);
    if (fx.version == state_format::kVersion) {
      EXPECT_EQ(fresh, bytes) << fx.file;
    }

    auto dst = fixture_memory(which, false);
    SpanSource src2(bytes);
    Result<std::vector<int32_t>> tokens =
        state_read(*dst, test_fingerprint(), &src2, info->scope, which == 0 ? 0 : -1);
    ASSERT_TRUE(tokens.ok()) << fx.file << ": " << tokens.status().to_string();
    EXPECT_EQ(tokens->back(), 500 + which);
    if (which == 0) {
      EXPECT_EQ(seq_bytes(static_cast<KvCache&>(*dst), 0), seq_bytes(static_cast<KvCache&>(*m), 1));
    } else {
      EXPECT_EQ(full_snapshot(static_cast<SwaKvCache&>(*dst)),
                full_snapshot(static_cast<SwaKvCache&>(*m)));
    }
  }
}

// --- the fuzz target's seed corpus ------------------------------------------------------------

// Seeds for tests/fuzz/fuzz_state.cc: valid states of every shape its memories accept. Written
// with MNEMO_WRITE_FUZZ_CORPUS=1; always checked to restore into the fuzz target's memories.
std::vector<std::pair<std::string, std::vector<uint8_t>>> fuzz_seeds() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds;
  auto add = [&](const std::string& name, const Memory& m, state_format::Scope scope, SeqId seq,
                 std::vector<int32_t> tokens) {
    std::vector<uint8_t> out;
    VectorSink sink(&out);
    CHECK(state_write(m, test_fingerprint(), &sink,
                      StateWriteSpec{.scope = scope, .seq = seq, .k_type = {}, .v_type = {}},
                      tokens)
              .ok());
    seeds.emplace_back(name, std::move(out));
  };
  using sf = state_format::Scope;
  testing::FuzzMemories fm = testing::make_fuzz_memories();
  add("kv_seq", *fm.kv, sf::kSequence, 0, {});
  add("kv_seq_tokens", *fm.kv, sf::kSequence, 1, {1, 2, 3});
  add("kv_whole", *fm.kv, sf::kWhole, -1, {9});
  add("swa_seq", *fm.swa, sf::kSequence, 0, {});
  add("swa_whole", *fm.swa, sf::kWhole, -1, {});
  auto empty = make_cache(state_config(16, 2, false));
  add("kv_seq_empty", *empty, sf::kSequence, 1, {});
  auto q4 = make_cache(state_config(8, 1, true, GgmlType::Q4_0, GgmlType::IQ4_NL, 32));
  fill(*q4, 0, 4, 7, false);
  CHECK(q4->seq_add(0, 2, -1, 3).ok());
  add("kv_seq_q4_rotated_shifted", *q4, sf::kSequence, 0, {5, 6});
  auto shared = make_cache(state_config(16, 2, true));
  fill(*shared, 0, 4, 8, false);
  CHECK(shared->seq_cp(0, 1, 0, 2).ok());
  add("kv_whole_unified_shared", *shared, sf::kWhole, -1, {});
  return seeds;
}

TEST(StateTest, FuzzCorpusIsValid) {
  const std::string dir =
      std::string(std::getenv("MNEMO_SOURCE_DIR") ? std::getenv("MNEMO_SOURCE_DIR") : ".") +
      "/tests/fuzz/corpus/state/";
  for (const auto& [name, bytes] : fuzz_seeds()) {
    if (std::getenv("MNEMO_WRITE_FUZZ_CORPUS") != nullptr) {
      std::ofstream(dir + name + ".mnst", std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
    std::ifstream in(dir + name + ".mnst", std::ios::binary);
    ASSERT_TRUE(in.good()) << "missing seed " << name;
    const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
    testing::FuzzMemories fm = testing::make_fuzz_memories();
    const bool ok = state_seq_set_data(*fm.kv, test_fingerprint(), file, 1).ok() ||
                    state_set_data(*fm.kv, test_fingerprint(), file).ok() ||
                    state_seq_set_data(*fm.swa, test_fingerprint(), file, 1).ok() ||
                    state_set_data(*fm.swa, test_fingerprint(), file).ok();
    EXPECT_TRUE(ok) << name << " restores into none of the fuzz target's memories";
    EXPECT_LE(file.size(), 65536u) << name << " exceeds scripts/fuzz's -max_len";
  }
}

// --- a source that changes between the passes --------------------------------------------------

// Serves `bytes` on the first pass and a damaged copy once the reader seeks back (as a file
// rewritten by another process between the two passes would).
class ChangingSource final : public StateSource {
 public:
  ChangingSource(std::vector<uint8_t> bytes, size_t damage_at) : a_(std::move(bytes)), b_(a_) {
    b_[damage_at] ^= 0x40;
  }
  Status next(size_t n, const uint8_t** out) override {
    const auto& cur = seeks_ > 0 ? b_ : a_;
    if (n > cur.size() - pos_) return Status::corruption("truncated");
    *out = cur.data() + pos_;
    pos_ += n;
    return Status();
  }
  uint64_t tell() const override { return pos_; }
  Status seek(uint64_t off) override {
    pos_ = off;
    ++seeks_;
    return Status();
  }
  uint64_t size() const override { return a_.size(); }

 private:
  std::vector<uint8_t> a_, b_;
  size_t pos_ = 0;
  int seeks_ = 0;
};

TEST(StateTest, SourceChangedBetweenPassesEmptiesOnlyTheDestination) {
  auto src = make_cache(state_config(32, 2, false));
  fill(*src, 0, 10, 1);
  const std::vector<uint8_t> state = save_seq(*src, 0);
  auto dst = make_cache(state_config(32, 2, false));
  fill(*dst, 0, 5, 2);
  fill(*dst, 1, 5, 3);
  const auto other = seq_bytes(*dst, 1);
  ChangingSource cs(state, state.size() - 200);  // inside the last KVLY's rows
  Result<std::vector<int32_t>> r =
      state_read(*dst, test_fingerprint(), &cs, state_format::Scope::kSequence, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("changed while"), std::string::npos) << r.status().message();
  EXPECT_EQ(dst->seq_pos_max(0), -1);  // emptied, consistent
  EXPECT_EQ(seq_bytes(*dst, 1), other);
  fill(*dst, 0, 3, 4);  // and usable
  EXPECT_EQ(dst->seq_pos_max(0), 2);
}

}  // namespace
}  // namespace mnemo
