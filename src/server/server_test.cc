// Unit tests of the server's pure parts: slot file names, the stop-string / UTF-8 text stream,
// the error mapping (Status -> ErrorKind -> HTTP status and type), and JSON request parsing (over
// a tiny synthetic vocabulary). The HTTP server end to end is
// tested by tests/python/test_server.py against the real binary and model.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <string>

#include "server/api.h"
#include "server/errors.h"
#include "server/slot_files.h"
#include "server/test_tokenizer.h"
#include "server/text_stream.h"

namespace mnemo::server {
namespace {

TEST(SlotFileName, AcceptsPlainNames) {
  for (const char* ok : {"a", "slot0.bin", "user-42_state", "état.bin", "a.b.c", "x y"}) {
    EXPECT_TRUE(validate_slot_filename(ok).ok()) << ok;
  }
  EXPECT_TRUE(validate_slot_filename(std::string(kMaxSlotFileName, 'a')).ok());
  EXPECT_TRUE(validate_slot_filename("\u00e9t\u00e9 \u65e5\u672c \u2603.bin").ok());
}

TEST(SlotFileName, RejectsEveryListedCase) {
  const std::string cases[] = {
      "",                                      // empty
      std::string(256, 'a'),                   // over 255 bytes
      std::string(kMaxSlotFileName + 1, 'a'),  // no room for the temporary ".tmp.PID" name
      "\xef\xbb\xbfbom",                       // U+FEFF byte-order mark
      "evil\xe2\x80\xaegnp.bin",               // U+202E right-to-left override
      "line\xe2\x80\xa8sep",                   // U+2028 line separator
      "iso\xe2\x81\xa6late",                   // U+2066 left-to-right isolate
      "c1\xc2\x85",                            // U+0085 next line (C1 control)
      "../etc/passwd",                         // traversal and separator
      "a/b",                                   // separator
      "a\\b",                                  // Windows separator
      "..",                                    // parent
      "a..b",                                  // contains ".."
      ".hidden",                               // leading dot
      " lead",                                 // leading space
      "trail.",                                // trailing dot
      "trail ",                                // trailing space
      std::string("a\0b", 3),                  // NUL
      "tab\there",                             // control character
      "del\x7f",                               // DEL
      "bad\xff",                               // not UTF-8
      "\xc0\xaf",                              // overlong '/'
      "/abs",                                  // absolute path
  };
  for (const std::string& c : cases) {
    Status st = validate_slot_filename(c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << "'" << c << "'";
    EXPECT_FALSE(st.message().empty());
  }
}

TEST(SlotFileName, PathStaysInsideTheDirectoryAndRefusesLinks) {
  char tmpl[] = "/tmp/mnemo_slot_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto p = slot_file_path(dir, "ok.bin");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, dir + "/ok.bin");
  EXPECT_FALSE(slot_file_path(dir, "../x").ok());
  ASSERT_EQ(symlink("/etc/passwd", (dir + "/link").c_str()), 0);
  auto l = slot_file_path(dir, "link");
  EXPECT_FALSE(l.ok());
  std::remove((dir + "/link").c_str());
  rmdir(dir.c_str());
}

TEST(TextStream, PassesTextWithoutStops) {
  TextStream ts;
  ts.reset({});
  EXPECT_EQ(ts.append("Hello"), "Hello");
  EXPECT_EQ(ts.append(" world"), " world");
  EXPECT_EQ(ts.flush(), "");
  EXPECT_FALSE(ts.stopped());
}

TEST(TextStream, HoldsBackIncompleteUtf8) {
  TextStream ts;
  ts.reset({});
  // "é" = C3 A9 split across two pieces.
  EXPECT_EQ(ts.append("caf\xc3"), "caf");
  EXPECT_EQ(ts.append("\xa9!"), "\xc3\xa9!");
  // A 4-byte character in three pieces.
  EXPECT_EQ(ts.append("\xf0\x9f"), "");
  EXPECT_EQ(ts.append("\x98"), "");
  EXPECT_EQ(ts.append("\x80"), "\xf0\x9f\x98\x80");
  // A dangling lead byte at the end is released by flush().
  EXPECT_EQ(ts.append("\xe2"), "");
  EXPECT_EQ(ts.flush(), "\xe2");
}

TEST(TextStream, StopsAtStopStringAcrossPieces) {
  TextStream ts;
  ts.reset({"###", "END"});
  EXPECT_EQ(ts.append("one two "), "one two ");
  EXPECT_EQ(ts.append("#"), "");  // could be the start of "###"
  EXPECT_EQ(ts.append("#"), "");
  EXPECT_EQ(ts.append("#tail"), "");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.stop_word(), "###");
  EXPECT_EQ(ts.text(), "one two ");
  EXPECT_EQ(ts.append("more"), "");
  EXPECT_EQ(ts.flush(), "");
}

TEST(TextStream, ReleasesAHeldPrefixThatDidNotMatch) {
  TextStream ts;
  ts.reset({"END"});
  EXPECT_EQ(ts.append("the E"), "the ");
  EXPECT_EQ(ts.append("Nx"), "ENx");
  EXPECT_EQ(ts.append(" EN"), " ");
  EXPECT_EQ(ts.flush(), "EN");
  EXPECT_FALSE(ts.stopped());
}

TEST(TextStream, StopInsideOnePieceKeepsTextBefore) {
  TextStream ts;
  ts.reset({"\n\n"});
  EXPECT_EQ(ts.append("line\n\nnext"), "line");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.stop_word(), "\n\n");
}

TEST(TextStream, EarliestOfSeveralStopsWins) {
  TextStream ts;
  ts.reset({"cd", "b"});
  EXPECT_EQ(ts.append("abcd"), "a");
  EXPECT_EQ(ts.stop_word(), "b");
}

class ApiTest : public ::testing::Test {
 protected:
  ApiTest()
      : tok_(tiny_tokenizer()), tmpl_(ChatTemplate::from_family(ChatTemplateFamily::kChatml)) {
    d_.n_slots = 4;
    d_.n_ctx_seq = 64;
    d_.n_predict_max = 100;
    d_.model_name = "tiny";
    d_.tok = &tok_;
    d_.sampling.temp = 0.8f;
  }
  Status parse(const char* text, Api api, ParsedCompletion* out) {
    return parse_completion(Json::parse(text), api, tok_, tmpl_, d_, out);
  }
  Tokenizer tok_;
  ChatTemplate tmpl_;
  ApiDefaults d_;
};

TEST_F(ApiTest, LlamaCompletionFields) {
  ParsedCompletion p;
  ASSERT_TRUE(parse(R"({"prompt": "abc", "n_predict": 7, "temperature": 0, "stop": ["x"],
                       "stream": true, "id_slot": 2, "cache_prompt": false, "seed": 5,
                       "return_tokens": true})",
                    Api::kLlama, &p)
                  .ok());
  EXPECT_EQ(p.req.n_predict, 7);
  EXPECT_EQ(p.req.sampling.temp, 0.0f);
  EXPECT_EQ(p.req.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(p.stream);
  EXPECT_EQ(p.req.id_slot, 2);
  EXPECT_FALSE(p.req.cache_prompt);
  EXPECT_EQ(p.req.sampling.seed, 5u);
  EXPECT_TRUE(p.return_tokens);
  EXPECT_FALSE(p.req.prompt.empty());
}

TEST_F(ApiTest, TokenPromptAndDefaults) {
  ParsedCompletion p;
  ASSERT_TRUE(parse(R"({"prompt": [3, 4, 5]})", Api::kLlama, &p).ok());
  EXPECT_EQ(p.req.prompt, (std::vector<TokenId>{3, 4, 5}));
  EXPECT_EQ(p.req.n_predict, 100);  // -n unset: the server's limit
  EXPECT_EQ(p.req.sampling.temp, 0.8f);
}

TEST_F(ApiTest, RejectsBadFieldsNamingThem) {
  struct Case {
    const char* body;
    Api api;
    const char* field;
  };
  const Case cases[] = {
      {R"({"prompt": "a", "n_predict": 101})", Api::kLlama, "n_predict"},
      {R"({"prompt": "a", "n_predict": "5"})", Api::kLlama, "n_predict"},
      {R"({"prompt": "a", "temperature": "hot"})", Api::kLlama, "temperature"},
      {R"({"prompt": "a", "top_p": 1.5})", Api::kOaiCompletion, "top_p"},
      {R"({"prompt": "a", "id_slot": 4})", Api::kLlama, "id_slot"},
      {R"({"prompt": "a", "stop": 3})", Api::kLlama, "stop"},
      {R"({"prompt": [1, 99999]})", Api::kLlama, "prompt"},
      {R"({"prompt": ["a", "b"]})", Api::kOaiCompletion, "prompt"},
      {R"({"prompt": "a", "n": 17})", Api::kOaiCompletion, "'n'"},
      {R"({"prompt": "a", "logprobs": 3})", Api::kOaiCompletion, "logprobs"},
      {R"({"prompt": "a", "n_probs": 21})", Api::kLlama, "n_probs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", Api::kOaiChat,
       "top_logprobs"},
      {R"({"n_predict": 3})", Api::kLlama, "prompt"},
      {R"({"messages": []})", Api::kOaiChat, "messages"},
      {R"({"messages": [{"role": "user", "content": 5}]})", Api::kOaiChat, "content"},
      {R"({"messages": [{"content": "x"}]})", Api::kOaiChat, "role"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", Api::kOaiChat,
       "text"},
      {R"([1, 2])", Api::kLlama, "object"},
  };
  for (const Case& c : cases) {
    ParsedCompletion p;
    Status st = parse(c.body, c.api, &p);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(st.message().find(c.field), std::string::npos) << c.body << " -> " << st.message();
  }
}

TEST_F(ApiTest, PromptLongerThanASlotIsOutOfRange) {
  std::string body = R"({"prompt": ")" + std::string(100, 'a') + R"("})";
  ParsedCompletion p;
  Status st = parse(body.c_str(), Api::kLlama, &p);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("64"), std::string::npos) << st.message();
}

TEST_F(ApiTest, ChatUsesTheTemplateAndMaxTokens) {
  ParsedCompletion p;
  ASSERT_TRUE(parse(R"({"messages": [{"role": "user", "content": [{"type": "text",
                       "text": "hi"}]}], "max_tokens": 3, "stream": true,
                       "stream_options": {"include_usage": true}})",
                    Api::kOaiChat, &p)
                  .ok());
  EXPECT_EQ(p.req.n_predict, 3);
  EXPECT_TRUE(p.include_usage);
}

TEST_F(ApiTest, ResponsesCarryUsageAndFinishReason) {
  ParsedCompletion p;
  ASSERT_TRUE(
      parse(R"({"messages": [{"role": "user", "content": "hi"}]})", Api::kOaiChat, &p).ok());
  CompletionResult r;
  r.text = "hello";
  r.finish = FinishReason::kLimit;
  r.stats.n_prompt = 10;
  r.stats.n_generated = 4;
  const Json j = completion_json(p, r, d_, new_response_ids(Api::kOaiChat));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 14);
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
}

TEST_F(ApiTest, DumpReplacesInvalidUtf8) {
  Json j = {{"content", std::string("a\xff")}};
  EXPECT_EQ(dump(j), "{\"content\":\"a\xef\xbf\xbd\"}");
}

TEST_F(ApiTest, DetokenizeChecksIds) {
  Json out;
  EXPECT_TRUE(detokenize_json(Json::parse(R"({"tokens": [3, 4]})"), tok_, &out).ok());
  EXPECT_FALSE(detokenize_json(Json::parse(R"({"tokens": [-1]})"), tok_, &out).ok());
  EXPECT_FALSE(detokenize_json(Json::parse(R"({"tokens": "x"})"), tok_, &out).ok());
}

TEST(Errors, EveryKindHasOneStatusAndType) {
  const struct {
    ErrorKind kind;
    int status;
    const char* type;
  } want[] = {
      {ErrorKind::kInvalidRequest, 400, "invalid_request_error"},
      {ErrorKind::kUnauthorized, 401, "authentication_error"},
      {ErrorKind::kNotFound, 404, "not_found_error"},
      {ErrorKind::kBusy, 409, "invalid_request_error"},
      {ErrorKind::kPromptTooLong, 400, "exceed_context_size_error"},
      {ErrorKind::kCacheFull, 503, "unavailable_error"},
      {ErrorKind::kQueueFull, 503, "unavailable_error"},
      {ErrorKind::kTimeout, 503, "unavailable_error"},
      {ErrorKind::kNotSupported, 501, "not_supported_error"},
      {ErrorKind::kInternal, 500, "server_error"},
      {ErrorKind::kBodyTooLarge, 413, "invalid_request_error"},
  };
  static_assert(std::size(want) == size_t(ErrorKind::kCount));
  for (const auto& w : want) {
    EXPECT_EQ(http_error(w.kind).status, w.status) << error_kind_name(w.kind);
    EXPECT_STREQ(http_error(w.kind).type, w.type) << error_kind_name(w.kind);
    const Json j = error_json(w.kind, "m");
    EXPECT_EQ(j["error"]["code"], w.status);
    EXPECT_EQ(j["error"]["type"], w.type);
  }
  EXPECT_EQ(error_kind_for_http_status(404), ErrorKind::kNotFound);
  EXPECT_EQ(error_kind_for_http_status(413), ErrorKind::kBodyTooLarge);
  EXPECT_EQ(error_kind_for_http_status(400), ErrorKind::kInvalidRequest);
}

TEST(Errors, TheSameCodeDependsOnWhereItCameFrom) {
  const Status unsupported = Status::not_supported("x");
  EXPECT_EQ(error_kind_for(unsupported, ErrorOrigin::kSlotRestore), ErrorKind::kInvalidRequest);
  EXPECT_EQ(error_kind_for(unsupported, ErrorOrigin::kSlotSave), ErrorKind::kNotSupported);
  EXPECT_EQ(error_kind_for(unsupported, ErrorOrigin::kRequantize), ErrorKind::kNotSupported);
  EXPECT_EQ(error_kind_for(unsupported, ErrorOrigin::kDecode), ErrorKind::kInternal);
  const Status full = Status::no_space("x");
  EXPECT_EQ(error_kind_for(full, ErrorOrigin::kSlotRestore), ErrorKind::kCacheFull);
  EXPECT_EQ(error_kind_for(full, ErrorOrigin::kRequantize), ErrorKind::kCacheFull);
  EXPECT_EQ(error_kind_for(full, ErrorOrigin::kDecode), ErrorKind::kCacheFull);
  EXPECT_EQ(error_kind_for(full, ErrorOrigin::kSlotSave), ErrorKind::kInternal);
  EXPECT_EQ(error_kind_for(Status::out_of_range("x"), ErrorOrigin::kRequest),
            ErrorKind::kPromptTooLong);
  EXPECT_EQ(error_kind_for(Status::invalid_argument("x"), ErrorOrigin::kRequest),
            ErrorKind::kInvalidRequest);
  EXPECT_EQ(error_kind_for(Status::not_found("x"), ErrorOrigin::kRequest), ErrorKind::kNotFound);
  // As llama-server: a missing file is the client's bad request (400), not a missing route.
  EXPECT_EQ(error_kind_for(Status::not_found("x"), ErrorOrigin::kSlotRestore),
            ErrorKind::kInvalidRequest);
  EXPECT_EQ(error_kind_for(Status::corruption("x"), ErrorOrigin::kSlotRestore),
            ErrorKind::kInvalidRequest);
  EXPECT_EQ(error_kind_for(Status::io_error("x"), ErrorOrigin::kSlotRestore), ErrorKind::kInternal);
  EXPECT_EQ(error_kind_for(Status::invalid_argument("x"), ErrorOrigin::kRequantize),
            ErrorKind::kInvalidRequest);
}

TEST(Api, RequantizeLeavesOutTypesTheBodyLeavesOut) {
  ControlRequest r;
  ASSERT_TRUE(parse_requantize(Json::parse(R"({"slot": 2, "ctk": "q8_0"})"), 4, &r).ok());
  EXPECT_EQ(r.kind, ControlKind::kRequantize);
  EXPECT_EQ(r.slot, 2);
  EXPECT_EQ(r.type_k, GgmlType::Q8_0);
  EXPECT_FALSE(r.type_v.has_value());
  ASSERT_TRUE(parse_requantize(Json::parse(R"({"ctv": "q4_0"})"), 4, &r).ok());
  EXPECT_EQ(r.slot, -1);
  EXPECT_FALSE(r.type_k.has_value());
  EXPECT_EQ(r.type_v, GgmlType::Q4_0);
  EXPECT_FALSE(parse_requantize(Json::parse(R"({"slot": 4, "ctk": "f16"})"), 4, &r).ok());
  EXPECT_FALSE(parse_requantize(Json::parse(R"({"slot": 0})"), 4, &r).ok());
  EXPECT_FALSE(parse_requantize(Json::parse(R"({"ctk": "q9_9"})"), 4, &r).ok());
}

TEST(Api, SlotsWithoutKvHaveNullTypes) {
  ControlReply snap;
  SlotInfo kv;
  kv.type_k = GgmlType::Q8_0;
  kv.type_v = GgmlType::F16;
  kv.bytes = 10;
  SlotInfo rs;
  rs.id = 1;
  rs.bytes = 20;
  snap.slots = {kv, rs};
  const Json j = slots_json(snap);
  EXPECT_EQ(j[0]["type_k"], "q8_0");
  EXPECT_EQ(j[0]["type_v"], "f16");
  EXPECT_TRUE(j[1]["type_k"].is_null());
  EXPECT_TRUE(j[1]["type_v"].is_null());
  EXPECT_EQ(j[1]["bytes"], 20);
}

}  // namespace
}  // namespace mnemo::server
