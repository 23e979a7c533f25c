// Damaged states (leveldb's corruption_test in spirit): every truncation, every flipped byte,
// trailing garbage, a newer version, unknown sections. Each must fail with an error naming the
// cause and leave the memory byte-equal to before, with later requests unaffected.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mnemo/state.h"
#include "mnemo/state_format.h"
#include "mnemo/state_io.h"
#include "support/state_test_util.h"

namespace mnemo {
namespace {

namespace sf = state_format;
using namespace testing;  // NOLINT(build/namespaces): support/state_test_util.h's helpers

struct Fixture {
  std::unique_ptr<KvCache> src;
  std::unique_ptr<KvCache> dst;
  std::vector<uint8_t> state;
  std::string before;
};

Fixture make_fixture(bool whole) {
  Fixture f;
  f.src = make_cache(state_config(16, 2, false, GgmlType::Q8_0, GgmlType::Q4_0, 32));
  fill(*f.src, 0, 3, 1);
  fill(*f.src, 1, 2, 2);
  CHECK(f.src->seq_add(0, 1, -1, 5).ok());
  StateWriteSpec spec;
  spec.scope = whole ? sf::Scope::kWhole : sf::Scope::kSequence;
  spec.seq = whole ? -1 : 0;
  VectorSink sink(&f.state);
  const std::vector<int32_t> tokens = {3, 1, 4};
  CHECK(state_write(*f.src, test_fingerprint(), &sink, spec, tokens).ok());
  f.dst = make_cache(state_config(16, 2, false, GgmlType::Q8_0, GgmlType::Q4_0, 32));
  fill(*f.dst, 0, 4, 3);
  fill(*f.dst, 1, 1, 4);
  f.before = full_snapshot(*f.dst);
  return f;
}

Status restore(Fixture& f, std::span<const uint8_t> bytes, bool whole) {
  SpanSource src(bytes);
  return state_read(*f.dst, test_fingerprint(), &src,
                    whole ? sf::Scope::kWhole : sf::Scope::kSequence, whole ? -1 : 1)
      .status();
}

class Corruption : public ::testing::TestWithParam<bool> {};

TEST_P(Corruption, EveryTruncationFails) {
  const bool whole = GetParam();
  Fixture f = make_fixture(whole);
  ASSERT_TRUE(restore(f, f.state, whole).ok());  // the intact state restores
  f = make_fixture(whole);
  for (size_t n = 0; n < f.state.size(); ++n) {
    Status st = restore(f, std::span(f.state.data(), n), whole);
    ASSERT_FALSE(st.ok()) << "truncated to " << n << " bytes was accepted";
    ASSERT_EQ(st.code(), StatusCode::kCorruption) << n << ": " << st.to_string();
    ASSERT_EQ(full_snapshot(*f.dst), f.before) << "memory changed after truncation to " << n;
  }
}

TEST_P(Corruption, EveryFlippedByteFails) {
  const bool whole = GetParam();
  Fixture f = make_fixture(whole);
  std::vector<uint8_t> bad = f.state;
  for (size_t i = 0; i < bad.size(); ++i) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80)}) {
      bad[i] ^= mask;
      Status st = restore(f, bad, whole);
      bad[i] ^= mask;
      ASSERT_FALSE(st.ok()) << "flipping byte " << i << " was not detected";
      ASSERT_EQ(full_snapshot(*f.dst), f.before) << "memory changed after flipping byte " << i;
    }
  }
  // Later requests are unaffected.
  fill(*f.dst, 1, 2, 9);
  EXPECT_EQ(f.dst->seq_pos_max(1), 2);
}

INSTANTIATE_TEST_SUITE_P(State, Corruption, ::testing::Bool());

TEST(CorruptionTest, MessagesNameTheCause) {
  Fixture f = make_fixture(false);
  auto check = [&](std::vector<uint8_t> bytes, StatusCode code, const std::string& says) {
    Status st = restore(f, bytes, false);
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
    EXPECT_EQ(full_snapshot(*f.dst), f.before);
  };
  std::vector<uint8_t> b = f.state;
  b[9] = 2;  // version 2 (a future version)
  check(b, StatusCode::kNotSupported, "newer than this build reads");
  b = f.state;
  b[0] = 'X';
  check(b, StatusCode::kCorruption, "not a mnemo state");
  b = f.state;
  b[b.size() - 30] ^= 4;  // inside TOKN's payload
  check(b, StatusCode::kCorruption, "section TOKN");
  b = f.state;
  b.push_back(0);
  check(b, StatusCode::kCorruption, "after the end marker");
  b.assign(f.state.begin(), f.state.begin() + 100);
  check(b, StatusCode::kCorruption, "truncated");
  check({}, StatusCode::kCorruption, "not a mnemo state");
  b = f.state;
  b[f.state.size() / 2] ^= 0x10;  // KV rows
  check(b, StatusCode::kCorruption, "checksum mismatch");
}

// Rebuilds a state section by section through the writer, so sections can be added / changed
// with valid checksums.
std::vector<uint8_t> rewrite(const std::vector<uint8_t>& state, uint32_t insert_before,
                             uint32_t tag, std::vector<uint8_t> payload) {
  SpanSource src(state);
  StateReader r(&src);
  CHECK(r.read_file_header().ok());
  std::vector<uint8_t> out;
  VectorSink sink(&out);
  StateWriter w(&sink);
  CHECK(w.write_file_header().ok());
  while (r.offset() < r.source_size()) {
    auto s = r.begin_section();
    CHECK(s.ok());
    std::vector<uint8_t> body(s->length);
    CHECK(r.get(body.data(), body.size()).ok());
    CHECK(r.end_section().ok());
    if (s->tag == insert_before) CHECK(w.write_section(tag, payload).ok());
    CHECK(w.write_section(s->tag, body).ok());
  }
  return out;
}

TEST(CorruptionTest, AncillarySectionsAreSkippedCriticalOnesRefused) {
  Fixture f = make_fixture(false);
  const auto with_note =
      rewrite(f.state, sf::kTagTokens, sf::make_tag('n', 'o', 't', 'e'), {'h', 'e', 'l', 'l', 'o'});
  EXPECT_TRUE(restore(f, with_note, false).ok());
  f = make_fixture(false);
  const auto with_crit = rewrite(f.state, sf::kTagTokens, sf::make_tag('X', 'T', 'R', 'A'), {1});
  Status st = restore(f, with_crit, false);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("expected section TOKN, found XTRA"), std::string::npos)
      << st.message();
  EXPECT_EQ(full_snapshot(*f.dst), f.before);
}

}  // namespace
}  // namespace mnemo
