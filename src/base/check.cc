#include "mnemo/check.h"

#include <cstdio>
#include <cstdlib>

namespace mnemo::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* cond) {
  os_ << file << ":" << line << ": CHECK failed: " << cond << " ";
}

CheckFailure::~CheckFailure() {
  std::string s = os_.str();
  std::fprintf(stderr, "%s\n", s.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace mnemo::internal
