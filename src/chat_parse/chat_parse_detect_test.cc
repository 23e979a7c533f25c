// detect_chat_format on the real chat templates of models/templates (llama.cpp's test set): every
// file there has its expected format below, and every file below must be there.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "chat_parse/chat_parse.h"

namespace mnemo::chat_parse {
namespace {

namespace fs = std::filesystem;
using F = ChatFormat;

// Families without a parser here (Apertus, GigaChat, Kimi K3, LFM2, MiniMax M1 / M3, Solar,
// Functionary v3.2, gemma 4, DeepSeek V3.2 / V4 DSML, muse, Hy3, ...) are generic: with tools the
// server asks them for the generic JSON answer, and their thinking (when the template closes it
// with </think>) is split.
const std::map<std::string, ChatFormat> kExpected = {
    {"Apertus-8B-Instruct.jinja", F::kGeneric},
    {"Apriel-1.6-15b-Thinker-fixed.jinja", F::kApriel15},
    {"Bielik-11B-v3.0-Instruct.jinja", F::kHermes},
    {"ByteDance-Seed-OSS.jinja", F::kSeedOss},
    {"Cohere2MoE.jinja", F::kCommandR7B},
    {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", F::kGeneric},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", F::kCommandR7B},
    {"GLM-4.6.jinja", F::kGlm45},
    {"GLM-4.7-Flash.jinja", F::kGlm45},
    {"GigaChat3-10B-A1.8B.jinja", F::kGeneric},
    {"GigaChat3.1-10B-A1.8B.jinja", F::kGeneric},
    {"HuggingFaceTB-SmolLM3-3B.jinja", F::kGenericThink},
    {"Kimi-K2-Instruct.jinja", F::kKimiK2},
    {"Kimi-K2-Thinking.jinja", F::kKimiK2},
    {"Kimi-K3.jinja", F::kGeneric},
    {"LFM2-8B-A1B.jinja", F::kGeneric},
    {"LFM2.5-8B-A1B.jinja", F::kGenericThink},
    {"LFM2.5-Instruct.jinja", F::kGenericThink},
    {"MiMo-VL.jinja", F::kHermes},
    {"MiniMax-M1.jinja", F::kGeneric},
    {"MiniMax-M2.jinja", F::kMiniMaxM2},
    {"MiniMax-M3.jinja", F::kGeneric},
    {"Mistral-Small-3.2-24B-Instruct-2506.jinja", F::kMistral},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", F::kQwen3Coder},
    {"NVIDIA-Nemotron-Nano-v2.jinja", F::kNemotronV2},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", F::kHermes},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", F::kHermes},
    {"Qwen-QwQ-32B.jinja", F::kHermes},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", F::kHermes},
    {"Qwen-Qwen3-0.6B.jinja", F::kHermes},
    {"Qwen3-Coder.jinja", F::kQwen3Coder},
    {"Qwen3.5-4B.jinja", F::kQwen3Coder},
    {"Reka-Edge.jinja", F::kHermes},
    {"Spark2.5.jinja", F::kGlm45},
    {"StepFun3.5-Flash.jinja", F::kQwen3Coder},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", F::kDeepSeekR1},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", F::kDeepSeekR1},
    {"deepseek-ai-DeepSeek-V3.1.jinja", F::kDeepSeekV31},
    {"deepseek-ai-DeepSeek-V3.2.jinja", F::kGenericThink},
    {"deepseek-ai-DeepSeek-V4-Flash-0731.jinja", F::kGenericThink},
    {"deepseek-ai-DeepSeek-V4.jinja", F::kGenericThink},
    {"fireworks-ai-llama-3-firefunction-v2.jinja", F::kFirefunctionV2},
    {"google-gemma-2-2b-it.jinja", F::kGeneric},
    {"google-gemma-4-31B-it-interleaved.jinja", F::kGeneric},
    {"google-gemma-4-31B-it.jinja", F::kGeneric},
    {"ibm-granite-granite-3.3-2B-Instruct.jinja", F::kGranite},
    {"ibm-granite-granite-4.0.jinja", F::kHermes},
    {"ibm-granite-granite-4.1.jinja", F::kHermes},
    {"inclusionai-ling-3.0-flash.jinja", F::kGlm45},
    {"llama-cpp-deepseek-r1.jinja", F::kDeepSeekR1},
    {"llama-cpp-rwkv-world.jinja", F::kGenericThink},
    {"meetkai-functionary-medium-v3.1.jinja", F::kFunctionaryV31},
    {"meetkai-functionary-medium-v3.2.jinja", F::kGeneric},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", F::kLlama3},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", F::kLlama3},
    {"meta-llama-Llama-3.3-70B-Instruct.jinja", F::kLlama3},
    {"microsoft-Phi-3.5-mini-instruct.jinja", F::kGeneric},
    {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", F::kMistral},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", F::kMistralNemo},
    {"moonshotai-Kimi-K2.jinja", F::kKimiK2},
    {"muse-glimmer.jinja", F::kGeneric},
    {"openai-gpt-oss-120b.jinja", F::kGptOss},
    {"openbmb-MiniCPM5-1B.jinja", F::kGenericThink},
    {"poolside-Laguna-S-2.1.jinja", F::kGlm45},
    {"poolside-Laguna-XS-2.1.jinja", F::kGlm45},
    {"poolside-Laguna-XS.2.jinja", F::kGlm45},
    {"tencent-Hy3.jinja", F::kGeneric},
    {"unsloth-Apriel-1.5.jinja", F::kApriel15},
    {"unsloth-mistral-Devstral-Small-2507.jinja", F::kMistral},
    {"upstage-Solar-Open-100B.jinja", F::kGeneric},
};

fs::path templates_dir() {
  const char* src = std::getenv("MNEMO_SOURCE_DIR");
  return fs::path(src ? src : ".") / "models" / "templates";
}

TEST(DetectChatFormatTest, EveryTemplateOfTheTestSet) {
  const fs::path dir = templates_dir();
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no " << dir << " (models/ not fetched)";
  EXPECT_EQ(kExpected.size(), 70u);
  for (const auto& [file, want] : kExpected) {
    std::ifstream in(dir / file, std::ios::binary);
    ASSERT_TRUE(in.good()) << "missing template " << (dir / file);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(chat_format_name(detect_chat_format(ss.str())), chat_format_name(want)) << file;
  }
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".jinja") continue;
    EXPECT_TRUE(kExpected.count(e.path().filename().string()))
        << "template without an expected format: " << e.path().filename();
  }
}

TEST(DetectChatFormatTest, MarkersAndNames) {
  EXPECT_EQ(detect_chat_format(""), ChatFormat::kGeneric);
  EXPECT_EQ(detect_chat_format("{{ '<think>' }}...{{ '</think>' }}"), ChatFormat::kGenericThink);
  EXPECT_EQ(detect_chat_format("<tool_call>{{ tool_call | tojson }}</tool_call>"),
            ChatFormat::kHermes);
  // Qwen3-Coder's template also writes <tool_call>: the more specific rule wins.
  EXPECT_EQ(detect_chat_format("<tool_call>\n<function={{ n }}>\n<parameter={{ k }}>"),
            ChatFormat::kQwen3Coder);
  EXPECT_EQ(detect_chat_format("[TOOL_CALLS]{{ name }}[ARGS]{{ args }}"), ChatFormat::kMistral);
  EXPECT_EQ(detect_chat_format("[TOOL_CALLS]{{ calls | tojson }}"), ChatFormat::kMistralNemo);
  std::set<std::string_view> names;
  for (int f = 0; f <= int(ChatFormat::kGptOss); ++f) {
    names.insert(chat_format_name(ChatFormat(f)));
  }
  EXPECT_EQ(names.size(), size_t(ChatFormat::kGptOss) + 1);  // distinct
  EXPECT_EQ(names.count("unknown"), 0u);
}

}  // namespace
}  // namespace mnemo::chat_parse
