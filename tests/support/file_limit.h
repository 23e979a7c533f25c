// A disk that fills up mid-write, for the tests of what a failed save leaves behind (state files,
// the prompt cache's disk tier). Test-only, header-only.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>

namespace mnemo::testing {

/// From now on the process may write no file larger than `bytes` (RLIMIT_FSIZE; SIGXFSZ is
/// ignored, so a write past the limit fails with EFBIG as on a full disk). *old receives the limit
/// before, which the test sets back (setrlimit(RLIMIT_FSIZE, old)). Call it under
/// ASSERT_NO_FATAL_FAILURE: it asserts that both calls succeed.
inline void limit_file_size(rlim_t bytes, rlimit* old) {
  ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, old), 0);
  rlimit small = *old;
  small.rlim_cur = bytes;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
}

}  // namespace mnemo::testing
