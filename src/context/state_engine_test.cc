// Engine-level state and requantization tests: the next-token logits after a restore (or a
// requantization) against an uninterrupted run, on the real SmolLM2-135M model (skipped when
// models/ has not been fetched) and on tiny synthetic llama / gemma3 models (write_tiny_model).
//
// Exactness: a restore of the same K/V type reproduces the uninterrupted run bit for bit
// (same positions, cell order and n_kv, so the same arithmetic). A converted type is compared
// with a tolerance, documented in docs/kv-quality.md and at conversion_tolerance() below.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/swa_kv_cache.h"
#include "mnemo/context.h"
#include "mnemo/model.h"
#include "mnemo/model_fingerprint.h"
#include "mnemo/state.h"
#include "support/tiny_model.h"

namespace mnemo {
namespace {

std::string source_dir() {
  const char* s = std::getenv("MNEMO_SOURCE_DIR");
  return s ? s : ".";
}

// Loads a model once per process; nullptr when the file is absent (the test then skips).
const Model* smollm2() {
  static std::unique_ptr<Model> m = [] {
    auto r = Model::load(source_dir() + "/models/SmolLM2-135M-Instruct-Q4_1.gguf");
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return m.get();
}

const Model* tiny(const std::string& arch) {
  static std::map<std::string, std::unique_ptr<Model>> cache;
  auto it = cache.find(arch);
  if (it != cache.end()) return it->second.get();
  const std::string path = ::testing::TempDir() + "/mnemo_state_tiny_" + arch + "_" +
                           std::to_string(::getpid()) + ".gguf";
  const Status st = testing::write_tiny_model(arch, path);
  CHECK(st.ok()) << st.to_string();
  auto r = Model::load(path);
  CHECK(r.ok()) << r.status().to_string();
  std::remove(path.c_str());  // the mapping stays valid
  return (cache[arch] = std::move(r).value()).get();
}

#define REQUIRE_SMOLLM2()         \
  const Model* model = smollm2(); \
  if (model == nullptr) GTEST_SKIP() << "models/ not fetched (scripts/fetch-model)"

std::vector<int32_t> prompt_tokens(const Model& m, int n, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i)
    t[i] = int32_t((i * 7919 + salt * 131 + 17) % (m.hparams().n_vocab - 20) + 10);
  return t;
}

ContextParams params(GgmlType type, uint32_t n_seq = 2, bool unified = false) {
  ContextParams p;
  p.n_ctx = 256 * n_seq;
  p.n_batch = 256;
  p.n_ubatch = 64;
  p.n_seq_max = n_seq;
  p.kv_unified = unified;
  p.type_k = p.type_v = type;
  p.n_threads = 2;
  return p;
}

std::unique_ptr<Context> make_ctx(const Model& m, const ContextParams& p) {
  auto r = Context::create(m, p);
  CHECK(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

// Decodes tokens into seq starting at position p0; the last row outputs logits.
void decode(Context& ctx, SeqId seq, const std::vector<int32_t>& tokens, Pos p0) {
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.add(tokens[i], p0 + Pos(i), {seq}, i + 1 == tokens.size());
  }
  Status st = ctx.decode(b);
  CHECK(st.ok()) << st.to_string();
}

std::vector<float> last_logits(const Context& ctx) {
  auto l = ctx.logits(ctx.n_outputs() - 1);
  return {l.begin(), l.end()};
}

// Logits of `next` at position n after the prompt was restored (or decoded) in ctx/seq.
std::vector<float> next_logits(Context& ctx, SeqId seq, int32_t next, Pos pos) {
  decode(ctx, seq, {next}, pos);
  return last_logits(ctx);
}

struct Diff {
  double max_abs = 0;  // largest |a - b| over the vocabulary
  double rel_l2 = 0;   // ||a - b|| / ||b||
  bool same_top1 = true;
  double top1_gap = 0;  // b's logit of b's top-1 minus b's logit of a's top-1 (0 when they agree)
};
Diff diff(const std::vector<float>& a, const std::vector<float>& b) {
  Diff d;
  double num = 0, den = 0;
  size_t ta = 0, tb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d.max_abs = std::max(d.max_abs, double(std::fabs(a[i] - b[i])));
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
    if (a[i] > a[ta]) ta = i;
    if (b[i] > b[tb]) tb = i;
  }
  d.rel_l2 = std::sqrt(num / den);
  d.same_top1 = ta == tb;
  d.top1_gap = double(b[tb]) - b[ta];
  return d;
}

std::vector<uint8_t> save_seq(const Context& ctx, SeqId seq) {
  Result<size_t> n = state_seq_get_size(ctx.memory(), ctx.fingerprint(), seq);
  CHECK(n.ok()) << n.status().to_string();
  std::vector<uint8_t> buf(*n);
  CHECK(state_seq_get_data(ctx.memory(), ctx.fingerprint(), seq, buf).ok());
  return buf;
}

// Tolerances of a converted restore (SmolLM2, 40-token prompt, next-token logits, relative L2
// error ||a - b|| / ||b||): measured, then given a margin of about 1.5x. docs/kv-quality.md
// explains them. Note the floor: on this model ANY change of the K/V representation, even
// f16 -> f32, moves the logits by 1-6 % (the matmuls quantize activations to 8 bits per 32
// elements, kernels.h, so tiny differences flip roundings and compound over 30 layers); 2.5 % is
// what f16 vs f32 K/V differ by on average over a 100-token prompt. Hence two checks:
//   conversion_tolerance(t): against the same prompt run natively in type t. The restored rows
//     went f32 -> f16 -> t instead of f32 -> t: one more rounding, nothing else.
//   type_tolerance(t): against the uninterrupted f16 run: the error of running with K/V type t
//     at all (the next token's K/V is written in t too), as the quality table measures it.
// Both are checked together with the top-1 token, which must not change for this prompt.
double conversion_tolerance(GgmlType t) {
  // Measured with the plain kernels / with repacked weights (Model::load's default).
  switch (t) {
    case GgmlType::F32:   // 0.059 / 0.022
    case GgmlType::BF16:  // 0.032 / 0.028
    case GgmlType::Q8_0:  // 0.025 - 0.031 / 0.056
      return 0.09;
    case GgmlType::Q5_0:  // 0.089 - 0.107 / 0.159
    case GgmlType::Q5_1:  // 0.070 / 0.102
      return 0.24;
    default:
      return 0.35;  // q4_0 0.080 / 0.090, q4_1 0.094 / 0.231, iq4_nl 0.070 - 0.094 / 0.135
  }
}
double type_tolerance(GgmlType t) {
  // Measured with the plain kernels / with repacked weights. The lossless restore (f16 rows
  // into f32 cells) moves 0.014 / 0.028: the floor of this one-token comparison.
  switch (t) {
    case GgmlType::F32:  // 0.014 / 0.028
    case GgmlType::F16:
    case GgmlType::BF16:  // 0.017 / 0.028
    case GgmlType::Q8_0:  // 0.016 - 0.021 / 0.047
      return 0.07;
    case GgmlType::Q5_0:  // 0.061 / 0.028
    case GgmlType::Q5_1:  // 0.040 / 0.049
      return 0.1;
    default:
      return 0.21;  // q4_0 0.041 / 0.083, q4_1 0.089 / 0.110, iq4_nl 0.137 / 0.145
  }
}

// --- same type: exact --------------------------------------------------------------------------

struct ExactCase {
  GgmlType type;
  bool src_unified;
  bool dst_unified;
  SeqId dst_seq;
};

class SmolExact : public ::testing::TestWithParam<ExactCase> {};

TEST_P(SmolExact, RestoredNextTokenLogitsAreBitIdentical) {
  REQUIRE_SMOLLM2();
  const ExactCase c = GetParam();
  const auto prompt = prompt_tokens(*model, 40);
  const int32_t next = 1234;
  auto a = make_ctx(*model, params(c.type, 2, c.src_unified));
  decode(*a, 0, prompt, 0);
  const std::vector<uint8_t> state = save_seq(*a, 0);
  const std::vector<float> want = next_logits(*a, 0, next, 40);

  auto b = make_ctx(*model, params(c.type, 2, c.dst_unified));
  decode(*b, 1 - c.dst_seq, prompt_tokens(*model, 7, 3), 0);  // another sequence is present
  ASSERT_TRUE(state_seq_set_data(b->memory(), b->fingerprint(), state, c.dst_seq).ok());
  const std::vector<float> got = next_logits(*b, c.dst_seq, next, 40);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << "max |diff| " << diff(got, want).max_abs;
}

INSTANTIATE_TEST_SUITE_P(
    State, SmolExact,
    ::testing::Values(ExactCase{GgmlType::F16, false, false, 0},
                      ExactCase{GgmlType::F16, false, false, 1},   // another seq_id
                      ExactCase{GgmlType::F16, false, true, 1},    // split -> unified
                      ExactCase{GgmlType::F16, true, false, 1},    // unified -> split
                      ExactCase{GgmlType::Q8_0, false, false, 1},  // rotated rows
                      ExactCase{GgmlType::Q4_0, true, false, 0}));

// --- converted type: within the documented tolerance -------------------------------------------

class SmolConvert : public ::testing::TestWithParam<GgmlType> {};

TEST_P(SmolConvert, RestoreIntoAnotherTypeIsWithinTolerance) {
  REQUIRE_SMOLLM2();
  const GgmlType t = GetParam();
  const auto prompt = prompt_tokens(*model, 40);
  const int32_t next = 1234;
  auto a = make_ctx(*model, params(GgmlType::F16));
  decode(*a, 0, prompt, 0);
  const std::vector<uint8_t> state = save_seq(*a, 0);
  const std::vector<float> want = next_logits(*a, 0, next, 40);
  auto b = make_ctx(*model, params(t));
  ASSERT_TRUE(state_seq_set_data(b->memory(), b->fingerprint(), state, 1).ok()) << type_name(t);
  const std::vector<float> got = next_logits(*b, 1, next, 40);
  // The same prompt run natively in type t, uninterrupted.
  auto native = make_ctx(*model, params(t));
  decode(*native, 0, prompt, 0);
  const Diff conv = diff(got, next_logits(*native, 0, next, 40));
  const Diff orig = diff(got, want);
  EXPECT_LE(conv.rel_l2, conversion_tolerance(t)) << type_name(t) << " vs native";
  EXPECT_LE(orig.rel_l2, type_tolerance(t)) << type_name(t) << " vs f16";
  // The next token survives the conversion for every type of 5 bits or more (measured on Intel
  // Sapphire Rapids, AMD Zen 3 and Zen 4, under every SIMD target). A 4-bit K/V type can move it:
  // iq4_nl under AVX3 on Zen 4 picked a token 0.90 below the f16 run's top (its rel L2, 0.151,
  // stays inside the bound above), so for q4_0 / q4_1 / iq4_nl the bound on the whole
  // distribution is the check.
  const bool four_bit = t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::IQ4_NL;
  if (!four_bit) {
    EXPECT_TRUE(orig.same_top1) << type_name(t);
  }
  std::printf(
      "[ restore f16 -> %-6s ] rel L2 vs native %.5f, vs f16 run %.5f (max |diff| %.3f, "
      "top-1 gap %.3f)\n",
      std::string(type_name(t)).c_str(), conv.rel_l2, orig.rel_l2, orig.max_abs, orig.top1_gap);
}

INSTANTIATE_TEST_SUITE_P(State, SmolConvert,
                         ::testing::Values(GgmlType::F32, GgmlType::BF16, GgmlType::Q8_0,
                                           GgmlType::Q5_1, GgmlType::Q5_0, GgmlType::Q4_1,
                                           GgmlType::Q4_0, GgmlType::IQ4_NL),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// requantize_seq and save -> restore into the same type convert rows the same way: the logits
// after either are bit-identical, and within the tolerance of the uninterrupted f16 run.
TEST(SmolConvertTest, RequantizeMatchesRestoreIntoTheNewType) {
  REQUIRE_SMOLLM2();
  const auto prompt = prompt_tokens(*model, 40);
  const int32_t next = 99;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    auto a = make_ctx(*model, params(GgmlType::F16));
    decode(*a, 1, prompt, 0);
    const std::vector<uint8_t> state = save_seq(*a, 1);
    ASSERT_TRUE(a->memory().requantize_seq(1, t, t).ok());
    const std::vector<float> requantized = next_logits(*a, 1, next, 40);

    auto ref = make_ctx(*model, params(GgmlType::F16));
    decode(*ref, 1, prompt, 0);
    const std::vector<float> want = next_logits(*ref, 1, next, 40);

    ContextParams p = params(GgmlType::F16);
    auto b = make_ctx(*model, p);
    ASSERT_TRUE(b->memory().requantize_seq(1, t, t).ok());  // an empty stream of type t
    ASSERT_TRUE(state_seq_set_data(b->memory(), b->fingerprint(), state, 1).ok());
    const std::vector<float> restored = next_logits(*b, 1, next, 40);
    EXPECT_EQ(std::memcmp(requantized.data(), restored.data(), restored.size() * sizeof(float)), 0)
        << type_name(t);
    EXPECT_LE(diff(requantized, want).rel_l2, type_tolerance(t)) << type_name(t);
  }
}

// One ubatch over two streams of different types (f16 and q4_0): the f16 sequence's logits do
// not depend on the other stream's type.
TEST(SmolConvertTest, StreamsOfDifferentTypesInOneUbatch) {
  REQUIRE_SMOLLM2();
  auto run = [&](bool requantize_other) {
    auto ctx = make_ctx(*model, params(GgmlType::F16));
    decode(*ctx, 0, prompt_tokens(*model, 20, 1), 0);
    decode(*ctx, 1, prompt_tokens(*model, 30, 2), 0);
    if (requantize_other)
      CHECK(ctx->memory().requantize_seq(1, GgmlType::Q4_0, GgmlType::Q4_0).ok());
    Batch b;
    b.add(55, 20, {0}, true);
    b.add(66, 30, {1}, true);
    CHECK(ctx->decode(b).ok());
    auto l = ctx->logits(0);
    return std::vector<float>(l.begin(), l.end());
  };
  const std::vector<float> plain = run(false);
  const std::vector<float> mixed = run(true);
  EXPECT_EQ(std::memcmp(plain.data(), mixed.data(), plain.size() * sizeof(float)), 0);
}

// Position shifts on rotated rows (K is un-rotated, re-RoPE'd, rotated again): after the same
// seq_rm + seq_add, a rotated q8_0 cache stays as close to f16 as an unshifted one does.
TEST(SmolConvertTest, ShiftsOfRotatedRowsStayCorrect) {
  REQUIRE_SMOLLM2();
  const auto prompt = prompt_tokens(*model, 40);
  auto run = [&](GgmlType t, bool rotation, bool shift) {
    ContextParams p = params(t);
    p.kv_rotation = rotation;
    auto ctx = make_ctx(*model, p);
    decode(*ctx, 0, prompt, 0);
    Pos next_pos = 40;
    if (shift) {
      CHECK(ctx->memory().seq_rm(0, 10, 20).ok());
      CHECK(ctx->memory().seq_add(0, 20, -1, -10).ok());
      next_pos = 30;
    }
    return next_logits(*ctx, 0, 777, next_pos);
  };
  for (bool shift : {false, true}) {
    const std::vector<float> f16 = run(GgmlType::F16, false, shift);
    const Diff rotated = diff(run(GgmlType::Q8_0, true, shift), f16);
    EXPECT_LE(rotated.rel_l2, type_tolerance(GgmlType::Q8_0)) << "shift " << shift;
    std::printf("[ q8_0 rotated, shift %d ] rel L2 vs f16 %.5f\n", int(shift), rotated.rel_l2);
  }
}

// A state of rotated q4_0 rows restored into caches that store rows differently: q4_0 without
// rotation (un-rotated and re-quantized), and f16 (un-rotated). The continuation stays within
// the q4_0 tolerances of the uninterrupted rotated run and keeps its top-1 token.
TEST(SmolConvertTest, RestoreAcrossRotationSettings) {
  REQUIRE_SMOLLM2();
  const auto prompt = prompt_tokens(*model, 40);
  auto a = make_ctx(*model, params(GgmlType::Q4_0));
  ASSERT_EQ(a->memory().breakdown().streams[0].rotation, 64u);
  decode(*a, 0, prompt, 0);
  const std::vector<uint8_t> state = save_seq(*a, 0);
  const std::vector<float> want = next_logits(*a, 0, 4321, 40);
  for (auto [type, rotation] : {std::pair{GgmlType::Q4_0, false}, std::pair{GgmlType::F16, true}}) {
    ContextParams p = params(type);
    p.kv_rotation = rotation;
    auto b = make_ctx(*model, p);
    ASSERT_EQ(b->memory().breakdown().streams[0].rotation, 0u);
    ASSERT_TRUE(state_seq_set_data(b->memory(), b->fingerprint(), state, 0).ok());
    const Diff d = diff(next_logits(*b, 0, 4321, 40), want);
    EXPECT_LE(d.rel_l2, conversion_tolerance(GgmlType::Q4_0)) << type_name(type);
    EXPECT_TRUE(d.same_top1) << type_name(type);
  }
}

TEST(SmolStateTest, FilesCarryTokensAndWrongModelsAreRefused) {
  REQUIRE_SMOLLM2();
  const auto prompt = prompt_tokens(*model, 12);
  auto a = make_ctx(*model, params(GgmlType::F16));
  decode(*a, 0, prompt, 0);
  const std::string path =
      ::testing::TempDir() + "/mnemo_engine_state_" + std::to_string(::getpid()) + ".mnst";
  ASSERT_TRUE(state_seq_save_file(a->memory(), a->fingerprint(), path, 0, prompt).ok());
  auto b = make_ctx(*model, params(GgmlType::F16));
  Result<std::vector<int32_t>> toks = state_seq_load_file(b->memory(), b->fingerprint(), path, 1);
  ASSERT_TRUE(toks.ok()) << toks.status().to_string();
  EXPECT_EQ(*toks, prompt);
  EXPECT_EQ(b->memory().seq_pos_max(1), 11);

  // The same file into a different model: refused by the fingerprint, nothing changes.
  const Model* other = tiny("llama");
  auto c = make_ctx(*other, params(GgmlType::F16));
  decode(*c, 0, prompt_tokens(*other, 5), 0);
  toks = state_seq_load_file(c->memory(), c->fingerprint(), path, 0);
  EXPECT_EQ(toks.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(toks.status().message().find("different model"), std::string::npos)
      << toks.status().message();
  EXPECT_EQ(c->memory().seq_pos_max(0), 4);
  std::remove(path.c_str());
  EXPECT_NE(model_fingerprint(*model).hparams_hash, model_fingerprint(*other).hparams_hash);
}

// --- tiny models (always run) ------------------------------------------------------------------

// gemma3 (sliding window 8 on five of six layers): the state carries both children, including
// the window cells behind n_swa that are still held; the continuation is bit-identical, across
// modes and seq_ids.
TEST(TinyStateTest, SlidingWindowModelContinuesExactly) {
  const Model* m = tiny("gemma3");
  const auto prompt = prompt_tokens(*m, 30);
  for (bool dst_unified : {false, true}) {
    ContextParams p = params(GgmlType::F16);
    p.n_ubatch = 16;
    auto a = make_ctx(*m, p);
    decode(*a, 0, prompt, 0);
    const std::vector<uint8_t> state = save_seq(*a, 0);
    const std::vector<float> want = next_logits(*a, 0, 42, 30);
    p.kv_unified = dst_unified;
    auto b = make_ctx(*m, p);
    ASSERT_TRUE(state_seq_set_data(b->memory(), b->fingerprint(), state, 1).ok());
    const auto& swa = static_cast<const SwaKvCache&>(b->memory());
    EXPECT_GT(swa.swa().cells(swa.swa().stream_of(1)).seq_n_cells(1), 8u);
    const std::vector<float> got = next_logits(*b, 1, 42, 30);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << "unified " << dst_unified << " max |diff| " << diff(got, want).max_abs;
  }
}

// A state saved from a window cache sized for a large n_ubatch holds window cells that a cache
// sized for a small n_ubatch has no room for; only the cells the window still shows are needed,
// and the continuation is bit-identical.
TEST(TinyStateTest, SlidingWindowRestoreNeedsOnlyTheWindow) {
  const Model* m = tiny("gemma3");
  const auto prompt = prompt_tokens(*m, 40);
  ContextParams p = params(GgmlType::F16);
  p.n_ubatch = 32;
  auto a = make_ctx(*m, p);
  decode(*a, 0, prompt, 0);
  const auto& swa_a = static_cast<const SwaKvCache&>(a->memory());
  const uint32_t saved = swa_a.swa().cells(swa_a.swa().stream_of(0)).seq_n_cells(0);
  const std::vector<uint8_t> state = save_seq(*a, 0);
  const std::vector<float> want = next_logits(*a, 0, 42, 40);
  for (bool unified : {false, true}) {
    p.n_ubatch = 1;
    p.kv_unified = unified;
    auto b = make_ctx(*m, p);
    const auto& swa_b = static_cast<const SwaKvCache&>(b->memory());
    ASSERT_GT(saved, swa_b.swa().config().n_ctx) << "the test needs more saved cells than room";
    ASSERT_TRUE(state_seq_set_data(b->memory(), b->fingerprint(), state, 1).ok());
    EXPECT_EQ(b->memory().seq_pos_max(1), 39);
    EXPECT_EQ(swa_b.swa().cells(swa_b.swa().stream_of(1)).seq_n_cells(1), m->hparams().n_swa - 1);
    const std::vector<float> got = next_logits(*b, 1, 42, 40);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << "unified " << unified << " max |diff| " << diff(got, want).max_abs;
    // Saved again, it restores into the large cache too.
    auto c = make_ctx(*m, params(GgmlType::F16));
    ASSERT_TRUE(state_seq_set_data(c->memory(), c->fingerprint(), save_seq(*b, 1), 0).ok());
  }
}

TEST(TinyStateTest, WholeMemoryRoundTripAndRequantize) {
  const Model* m = tiny("llama");
  auto a = make_ctx(*m, params(GgmlType::F16, 3));
  for (SeqId s = 0; s < 3; ++s) decode(*a, s, prompt_tokens(*m, 10 + 5 * s, s), 0);
  Result<size_t> n = state_get_size(a->memory(), a->fingerprint());
  ASSERT_TRUE(n.ok());
  std::vector<uint8_t> whole(*n);
  ASSERT_TRUE(state_get_data(a->memory(), a->fingerprint(), whole).ok());
  std::vector<std::vector<float>> want;
  for (SeqId s = 0; s < 3; ++s) want.push_back(next_logits(*a, s, 7, 10 + 5 * s));

  auto b = make_ctx(*m, params(GgmlType::F16, 3));
  ASSERT_TRUE(state_set_data(b->memory(), b->fingerprint(), whole).ok());
  for (SeqId s = 0; s < 3; ++s) {
    const std::vector<float> got = next_logits(*b, s, 7, 10 + 5 * s);
    EXPECT_EQ(std::memcmp(got.data(), want[s].data(), got.size() * sizeof(float)), 0) << s;
  }
  // Whole-cache requantization keeps decoding correct (head size 64: rotated q8_0).
  auto c = make_ctx(*m, params(GgmlType::F16, 3));
  ASSERT_TRUE(state_set_data(c->memory(), c->fingerprint(), whole).ok());
  ASSERT_TRUE(c->memory().requantize(GgmlType::Q8_0, GgmlType::Q8_0).ok());
  const MemoryBreakdown bd = c->memory().breakdown();
  EXPECT_EQ(bd.streams[0].k_type, GgmlType::Q8_0);
  EXPECT_EQ(bd.streams[0].rotation, 64u);
  // It converts exactly as a restore into q8_0 memory does (bit-identical logits), and stays
  // near the f16 run: rel L2 measured 0.019-0.029 (AVX2), 0.019-0.032 (SSE4), 0.008-0.009
  // (scalar float path) on this tiny random model, where 8-bit activations amplify the q8_0
  // rounding of K/V; 0.06 leaves room for other CPUs and flags a wrong row (rel L2 ~1).
  auto d = make_ctx(*m, params(GgmlType::Q8_0, 3));
  ASSERT_TRUE(state_set_data(d->memory(), d->fingerprint(), whole).ok());
  for (SeqId s = 0; s < 3; ++s) {
    const std::vector<float> got = next_logits(*c, s, 7, 10 + 5 * s);
    const std::vector<float> restored = next_logits(*d, s, 7, 10 + 5 * s);
    EXPECT_EQ(std::memcmp(got.data(), restored.data(), got.size() * sizeof(float)), 0) << s;
    EXPECT_LE(diff(got, want[s]).rel_l2, 0.06) << s;
  }
}

}  // namespace
}  // namespace mnemo
