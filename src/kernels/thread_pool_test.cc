// ThreadPool (include/mnemo/thread_pool.h): every task runs exactly once, thread ids are in
// range, the pool is reused across many calls, sleeping workers wake up, misuse aborts.
#include "mnemo/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace mnemo {
namespace {

TEST(ThreadPoolTest, EveryTaskRunsExactlyOnce) {
  for (int n_threads : {1, 2, 3, 5}) {
    ThreadPool pool(n_threads);
    EXPECT_EQ(pool.n_threads(), n_threads);
    for (int64_t n_tasks : {0, 1, 2, 7, 100, 1000}) {
      std::vector<std::atomic<int>> hits(n_tasks);
      std::atomic<int> bad_thread{0};
      pool.parallel_for(n_tasks, [&](int64_t task, int thread) {
        hits[task].fetch_add(1);
        if (thread < 0 || thread >= n_threads) bad_thread.fetch_add(1);
      });
      for (int64_t i = 0; i < n_tasks; ++i) ASSERT_EQ(hits[i].load(), 1) << "task " << i;
      EXPECT_EQ(bad_thread.load(), 0);
    }
  }
}

TEST(ThreadPoolTest, WorkersReallyRunTasks) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> per_thread(3);
  // Tasks that wait for each other can only finish if several threads run them at once.
  std::atomic<int> arrived{0};
  pool.parallel_for(3, [&](int64_t, int thread) {
    per_thread[thread].fetch_add(1);
    arrived.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 3 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  });
  EXPECT_EQ(arrived.load(), 3);
  for (int t = 0; t < 3; ++t) EXPECT_EQ(per_thread[t].load(), 1) << "thread " << t;
}

TEST(ThreadPoolTest, ManyCallsAndSleepingWorkers) {
  ThreadPool pool(2);
  int64_t total = 0;
  std::atomic<int64_t> sum{0};
  for (int call = 0; call < 2000; ++call) {
    pool.parallel_for(4, [&](int64_t task, int) { sum.fetch_add(task + 1); });
    total += 10;
  }
  EXPECT_EQ(sum.load(), total);
  // Workers that went to sleep (no spinning) must wake for the next call.
  pool.set_spin_us(0);
  for (int call = 0; call < 50; ++call) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    pool.parallel_for(4, [&](int64_t task, int) { sum.fetch_add(task + 1); });
    total += 10;
  }
  EXPECT_EQ(sum.load(), total);
}

// A shared pool (several contexts on their own threads): concurrent callers take turns instead
// of CHECK-failing (an unshared pool aborts, NestedCallAborts); every task of every call runs
// exactly once.
TEST(ThreadPoolTest, SharedPoolCallersTakeTurns) {
  ThreadPool pool(2);
  pool.set_shared(true);
  auto caller = [&](std::vector<std::atomic<int>>* hits) {
    for (int call = 0; call < 200; ++call) {
      pool.parallel_for(int64_t(hits->size()),
                        [&](int64_t task, int) { (*hits)[size_t(task)].fetch_add(1); });
    }
  };
  std::vector<std::atomic<int>> a(37), b(53);
  std::thread t1(caller, &a), t2(caller, &b);
  t1.join();
  t2.join();
  for (auto& h : a) EXPECT_EQ(h.load(), 200);
  for (auto& h : b) EXPECT_EQ(h.load(), 200);
}

TEST(ThreadPoolDeathTest, NestedCallAborts) {
  EXPECT_DEATH(
      {
        ThreadPool pool(2);
        pool.parallel_for(2, [&](int64_t, int) { pool.parallel_for(2, [](int64_t, int) {}); });
      },
      "concurrently or from inside a task");
}

}  // namespace
}  // namespace mnemo
