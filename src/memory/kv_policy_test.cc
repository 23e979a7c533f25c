// KvPolicy: ladder parsing, occupancy by bytes, least-recently-active moves, unified caches.
#include "mnemo/kv_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/state_test_util.h"

namespace mnemo {
namespace {

using testing::fill;
using testing::make_cache;
using testing::state_config;

TEST(KvPolicyTest, Parse) {
  auto p = KvPolicy::parse("f16,q8_0@0.75,q4_0@0.90");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->rungs().size(), 3u);
  EXPECT_EQ(p->rungs()[1].k_type, GgmlType::Q8_0);
  EXPECT_DOUBLE_EQ(p->rungs()[2].threshold, 0.9);
  EXPECT_EQ(p->to_string(), "f16,q8_0@0.75,q4_0@0.9");
  auto q = KvPolicy::parse(" f16 , q8_0/q4_0 @ 0.5 ");
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->rungs()[1].v_type, GgmlType::Q4_0);
  for (const char* bad : {"", "f16,", "f16,q8_0", "f16@0.5", "f16,q8_0@0.9,q4_0@0.8",
                          "f16,q9_9@0.5", "f16,q8_0@1.5", "f16,q8_0@abc", "f16,q4_K@0.5"}) {
    auto r = KvPolicy::parse(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(KvPolicyTest, OccupancyCountsBytesAgainstTheFirstRung) {
  auto pol = std::move(KvPolicy::parse("f16,q8_0@0.75")).value();
  auto c = make_cache(state_config(16, 4, false));
  fill(*c, 0, 8, 1, false);
  EXPECT_DOUBLE_EQ(pol.occupancy(c->breakdown()), 8.0 / 64);
  ASSERT_TRUE(c->requantize_seq(0, GgmlType::Q8_0, GgmlType::Q8_0).ok());
  EXPECT_DOUBLE_EQ(pol.occupancy(c->breakdown()), 8.0 / 64 * 34 / 64);
}

// Four full f16 sequences (occupancy 1.0, past both thresholds): the least recently active move
// down one rung at a time until occupancy falls below 0.75; the most recent one stays f16.
TEST(KvPolicyTest, LeastRecentlyActiveMoveDownOneRungAtATime) {
  auto pol = std::move(KvPolicy::parse("f16,q8_0@0.75,q4_0@0.90")).value();
  auto c = make_cache(state_config(16, 4, false));
  for (SeqId s = 0; s < 4; ++s) fill(*c, s, 16, 1 + s, false);
  const std::vector<uint64_t> last_active = {30, 10, 40, 20};
  auto one = pol.step(*c, last_active);  // default: one move per step
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].seq, 1);
  EXPECT_EQ((*one)[0].to_rung, 1u);
  auto rest = pol.step(*c, last_active, 10);
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->size(), 2u);
  EXPECT_EQ((*rest)[0].seq, 3);
  EXPECT_EQ((*rest)[1].seq, 0);
  EXPECT_LT((*rest)[1].occupancy_after, 0.75);
  EXPECT_EQ(c->storage().k_type(2), GgmlType::F16);
  for (SeqId s : {0, 1, 3}) EXPECT_EQ(c->storage().k_type(uint32_t(s)), GgmlType::Q8_0);
  EXPECT_NE(pol.describe(c->breakdown()).find("rung 1"), std::string::npos);
  // Below every threshold: nothing moves.
  auto none = pol.step(*c, last_active, 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(pol.step(*c, std::vector<uint64_t>(3, 0)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(KvPolicyTest, SecondRungWhenTheFirstIsNotEnough) {
  auto pol = std::move(KvPolicy::parse("f16,q8_0@0.3,q4_0@0.45")).value();
  auto c = make_cache(state_config(16, 2, false));
  fill(*c, 0, 16, 1, false);
  fill(*c, 1, 16, 2, false);
  auto moves = pol.step(*c, std::vector<uint64_t>{1, 2}, 10);
  ASSERT_TRUE(moves.ok());
  // 1.0 reaches the q4_0 rung: the least recently active sequence (0) moves first, and keeps
  // moving while it is below the reached rung: q8_0 (0.766), q4_0 (0.641); then seq 1 to q8_0
  // (0.406 < 0.45: only the q8_0 rung is reached, and nothing is left below it).
  ASSERT_EQ(moves->size(), 3u);
  EXPECT_EQ((*moves)[1].seq, 0);
  EXPECT_EQ((*moves)[1].to_rung, 2u);
  EXPECT_EQ((*moves)[2].seq, 1);
  EXPECT_EQ(c->storage().k_type(0), GgmlType::Q4_0);
  EXPECT_EQ(c->storage().k_type(1), GgmlType::Q8_0);
}

TEST(KvPolicyTest, UnifiedCacheMovesAsAWhole) {
  auto pol = std::move(KvPolicy::parse("f16,q8_0@0.5")).value();
  auto c = make_cache(state_config(32, 2, true));
  fill(*c, 0, 10, 1, false);
  fill(*c, 1, 10, 2, false);
  auto moves = pol.step(*c, std::vector<uint64_t>{1, 2});
  ASSERT_TRUE(moves.ok());
  ASSERT_EQ(moves->size(), 1u);
  EXPECT_EQ((*moves)[0].seq, -1);
  EXPECT_EQ(c->storage().k_type(0), GgmlType::Q8_0);
}

}  // namespace
}  // namespace mnemo
