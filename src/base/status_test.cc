#include "mnemo/status.h"

#include <gtest/gtest.h>

namespace mnemo {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return Status::invalid_argument("value must be positive, got " + std::to_string(v));
  return v;
}

Status use_parse(int v, int* out) {
  MNEMO_ASSIGN_OR_RETURN(*out, parse_positive(v));
  return Status();
}

TEST(StatusTest, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(Status().ok());
  Status s = Status::corruption("bad magic at offset 0");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.to_string(), "Corruption: bad magic at offset 0");
  EXPECT_EQ(s.with_context("model.gguf").message(), "model.gguf: bad magic at offset 0");
}

TEST(StatusTest, ResultPropagatesThroughMacros) {
  int out = 0;
  EXPECT_TRUE(use_parse(3, &out).ok());
  EXPECT_EQ(out, 3);
  Status s = use_parse(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, 3);
}

TEST(StatusDeathTest, ValueOfErrorResultAborts) {
  Result<int> r = Status::not_found("x");
  EXPECT_DEATH((void)r.value(), "Result::value\\(\\) on error");
}

}  // namespace
}  // namespace mnemo
