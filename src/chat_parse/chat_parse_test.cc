#include <gtest/gtest.h>
#include "chat_parse/chat_parse.h"
namespace mnemo::chat_parse { TEST(ChatParse, Smoke) { EXPECT_EQ(chat_format_name(ChatFormat::kHermes), "hermes"); } }
