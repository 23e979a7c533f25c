// KvCells bookkeeping and AlignedBuffer: derived indexes stay exact under set().

#include "memory/kv_cells.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/buffer.h"

namespace mnemo {
namespace {

TEST(SeqSetTest, Members) {
  SeqSet s;
  EXPECT_TRUE(s.none());
  EXPECT_EQ(s.first(), -1);
  s.set(200);
  s.set(3);
  s.set(64);
  EXPECT_EQ(s.count(), 3u);
  EXPECT_EQ(s.first(), 3);
  std::vector<SeqId> all;
  s.for_each([&](SeqId id) { all.push_back(id); });
  EXPECT_EQ(all, (std::vector<SeqId>{3, 64, 200}));
  s.reset(3);
  EXPECT_FALSE(s.test(3));
  EXPECT_TRUE(s.test(255) == false && s.test(64));
  EXPECT_EQ(SeqSet::of(7), SeqSet::of(7));
  EXPECT_NE(SeqSet::of(7), SeqSet::of(8));
}

TEST(KvCellsTest, SetMaintainsIndexes) {
  KvCells c(200, 4);
  EXPECT_EQ(c.used(), 0u);
  EXPECT_EQ(c.used_max(), 0u);
  EXPECT_EQ(c.seq_pos_max(0), -1);
  c.set(0, 10, SeqSet::of(0), 0);
  c.set(70, 11, SeqSet::of(0), 0);
  SeqSet both = SeqSet::of(0);
  both.set(2);
  c.set(130, 5, both, -4);
  EXPECT_EQ(c.used(), 3u);
  EXPECT_EQ(c.used_max(), 131u);
  EXPECT_EQ(c.n_shifted(), 1u);
  EXPECT_EQ(c.seq_pos_min(0), 5);
  EXPECT_EQ(c.seq_pos_max(0), 11);
  EXPECT_EQ(c.seq_pos_min(2), 5);
  EXPECT_EQ(c.seq_pos_max(2), 5);
  EXPECT_EQ(c.seq_n_cells(0), 3u);

  std::vector<uint32_t> cells;
  c.seq_cells(0, 6, 12, &cells);
  EXPECT_EQ(cells, (std::vector<uint32_t>{0, 70}));

  // Emptying the last occupied cell finds the previous one across 64-cell words.
  c.clear_cell(130);
  EXPECT_EQ(c.used_max(), 71u);
  EXPECT_EQ(c.n_shifted(), 0u);
  EXPECT_EQ(c.seq_pos_max(2), -1);
  EXPECT_EQ(c.seq_pos_min(0), 10);
  EXPECT_EQ(c.pos(130), -1);
  c.clear_cell(70);
  EXPECT_EQ(c.used_max(), 1u);
  c.clear_cell(0);
  EXPECT_EQ(c.used_max(), 0u);
  EXPECT_EQ(c.used(), 0u);

  // Moving a cell's position keeps the sequence index in order.
  c.set(5, 100, SeqSet::of(1), 0);
  c.set(6, 50, SeqSet::of(1), 0);
  c.set(5, 20, SeqSet::of(1), -80);
  EXPECT_EQ(c.seq_pos_min(1), 20);
  EXPECT_EQ(c.seq_pos_max(1), 50);
  // Duplicate positions are counted per cell.
  c.set(7, 20, SeqSet::of(1), 0);
  c.clear_cell(5);
  EXPECT_EQ(c.seq_pos_min(1), 20);
  EXPECT_EQ(c.seq_n_cells(1), 2u);

  c.set_head(9);
  c.clear();
  EXPECT_EQ(c.head(), 0u);
  EXPECT_EQ(c.used(), 0u);
  EXPECT_EQ(c.seq_n_cells(1), 0u);
}

TEST(AlignedBufferTest, MapsZeroedPagesAndFreesThem) {
  Result<AlignedBuffer> empty = AlignedBuffer::allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(empty->data(), nullptr);

  Result<AlignedBuffer> r = AlignedBuffer::allocate(10000);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  AlignedBuffer b = std::move(r).value();
  EXPECT_EQ(b.size(), 10000u);
  EXPECT_GE(b.mapped_bytes(), 10000u);
  EXPECT_EQ(b.mapped_bytes() % 4096, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % AlignedBuffer::kAlignment, 0u);
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b.data()[i], 0);
  std::memset(b.data(), 7, b.size());

  Result<AlignedBuffer> c = b.copy();
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->data(), b.data());
  EXPECT_EQ(std::memcmp(c->data(), b.data(), b.size()), 0);

  AlignedBuffer moved = std::move(b);
  EXPECT_EQ(b.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(moved.data()[9999], 7);
  moved.reset();
  EXPECT_TRUE(moved.empty());

  Result<AlignedBuffer> huge = AlignedBuffer::allocate(SIZE_MAX - 10);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kNoSpace);
}

}  // namespace
}  // namespace mnemo
