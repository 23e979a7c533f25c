// CHECK / DCHECK: abort on a broken internal invariant (a bug in mnemo, never bad input).
//
// CHECK is always on; DCHECK only in debug builds (NDEBUG unset). Both accept a streamed
// message: CHECK(n <= cap) << "n=" << n;  Never use them on values read from a file or a request:
// those get a Status (include/mnemo/status.h).
#pragma once

#include <sstream>

namespace mnemo::internal {

/// Collects the streamed message and aborts in its destructor, printing file:line and condition.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};

/// Swallows the stream when the check passes (keeps `CHECK(x) << ...` one expression).
struct CheckVoidify {
  void operator&(const CheckFailure&) {}
};

}  // namespace mnemo::internal

#define CHECK(cond)                            \
  (cond) ? (void)0                             \
         : ::mnemo::internal::CheckVoidify() & \
               ::mnemo::internal::CheckFailure(__FILE__, __LINE__, #cond)

#ifdef NDEBUG
#define DCHECK(cond) \
  while (false) CHECK(cond)
#else
#define DCHECK(cond) CHECK(cond)
#endif

#define CHECK_EQ(a, b) CHECK((a) == (b)) << #a " == " #b " (" << (a) << " vs " << (b) << ") "
#define CHECK_LE(a, b) CHECK((a) <= (b)) << #a " <= " #b " (" << (a) << " vs " << (b) << ") "
#define CHECK_LT(a, b) CHECK((a) < (b)) << #a " < " #b " (" << (a) << " vs " << (b) << ") "
