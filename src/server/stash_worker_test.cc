#include "server/stash_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace mnemo::server {
namespace {

using namespace std::chrono_literals;

// Jobs run in submission order on the worker's thread; a sequence is pending from submit() until
// its last job ran; on_done runs after every job; wait() returns once the sequence's jobs ran.
TEST(StashWorkerTest, PendingUntilItsJobsRanInOrder) {
  std::atomic<int> done{0};
  StashWorker w([&] { done.fetch_add(1); });
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  std::vector<int> order;  // written by the worker's thread only, read after wait_all()
  w.submit(3, [&, gate] {
    gate.wait();
    order.push_back(1);
  });
  w.submit(5, [&] { order.push_back(2); });
  w.submit(3, [&] { order.push_back(3); });
  EXPECT_TRUE(w.pending(3));
  EXPECT_TRUE(w.pending(5));  // queued behind the held job
  EXPECT_FALSE(w.pending(4));
  EXPECT_TRUE(w.any_pending());
  open.set_value();
  w.wait(5);
  EXPECT_FALSE(w.pending(5));
  w.wait_all();
  EXPECT_FALSE(w.pending(3));
  EXPECT_FALSE(w.any_pending());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  // on_done runs after a job's sequence stops being pending (so a loop it wakes sees that),
  // hence maybe just after wait_all() returned.
  for (int i = 0; i < 10000 && done.load() < 3; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(done.load(), 3);
}

// The destructor runs the jobs still queued before it joins: a stash submitted just before the
// server stops still reaches the cache.
TEST(StashWorkerTest, DestructorRunsQueuedJobs) {
  std::atomic<int> ran{0};
  {
    StashWorker w(nullptr);
    for (int i = 0; i < 5; ++i) w.submit(i, [&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 5);
}

// Paced, a job writes only what run_slice grants (a write may overdraw the last of it), and
// run_slice returns once the job waits for more; waited for, it runs to its end.
TEST(StashWorkerTest, PacedWritesAdvanceOneSlicePerRunSlice) {
  StashWorker w(nullptr);
  w.set_paced(true);
  std::atomic<int> written{0};
  w.submit(1, [&] {
    for (int i = 0; i < 10; ++i) {
      w.before_write(4);
      written.fetch_add(1);
    }
  });
  while (!w.waits_for_budget()) std::this_thread::yield();
  EXPECT_EQ(written.load(), 0);  // paced with no budget: nothing written
  w.run_slice(8);                // two writes of 4
  EXPECT_EQ(written.load(), 2);
  w.run_slice(5);  // 4, then 1 left: a third write overdraws it
  EXPECT_EQ(written.load(), 4);
  EXPECT_TRUE(w.pending(1));
  w.wait(1);  // unpaced while waited for: runs to its end
  EXPECT_EQ(written.load(), 10);
  EXPECT_FALSE(w.pending(1));
  w.run_slice(8);  // nothing pending: returns at once
}

}  // namespace
}  // namespace mnemo::server
