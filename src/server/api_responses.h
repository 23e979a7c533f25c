// OpenAI's Responses API (POST /v1/responses), shared by its two files: api_responses_input.cc
// reads a request into the OpenAI chat-completions body it runs as (the chat surfaces' parsing
// steps then apply, request.h and chat_output.h); api_responses.cc is the WireApi (parsing
// through those steps, the response object, its stream events, its errors) and the stored
// responses' GET / DELETE. The endpoint as a client sees it is docs/api.md's "POST
// /v1/responses". Runs on HTTP threads; nothing here throws.
#pragma once

#include <cstdint>

#include "server/request.h"

namespace mnemo::server {

/// A POST /v1/responses body as the chat completion it runs as.
struct ResponsesRequest {
  /// An OpenAI chat-completions body: "messages" (the instructions as a system message, then
  /// the conversation), "tools" / "tool_choice" / "parallel_tool_calls" in chat's form,
  /// "response_format" from text.format, "temperature", "top_p", "stream" and the llama-server
  /// extensions as given. Without "max_tokens": max_output_tokens below.
  Json chat;
  /// The stored conversation of previous_response_id (if any) and the input's messages, without
  /// the instructions (OpenAI does not carry them to the next response): what the response
  /// keeps with its output.
  Json conversation;
  /// The request fields the response object echoes, in OpenAI's names: instructions,
  /// max_output_tokens, model, parallel_tool_calls, previous_response_id, reasoning, store,
  /// text, tool_choice, tools (OpenAI's form), truncation ("disabled"), user, metadata.
  Json echo;
  int64_t max_output_tokens = -1;  // -1: absent
  bool store = true;
};

/// Reads the body `b` of POST /v1/responses (docs/api.md): "input" (a string: one user message;
/// or items: messages of role user, system, developer (as system) or assistant with text
/// content; function_call items, consecutive ones one assistant turn with tool_calls (ids =
/// call_id); function_call_output items as "tool" messages answering an earlier call; a
/// reasoning item as the reasoning_content of the assistant turn after it), after the stored
/// conversation of "previous_response_id" (looked up in d.responses), "instructions" first as a
/// system message; function "tools", "tool_choice", "parallel_tool_calls", "text.format",
/// "max_output_tokens" (>= 1), "temperature", "top_p", "stream", "store", "reasoning",
/// "metadata", "user", "truncation" checked; other fields ignored. Errors: NotFound "Previous
/// response with id '...' not found." for an id d.responses does not hold; InvalidArgument
/// whose message starts with the quoted field it is about (a malformed item, an item or tool
/// type other than those above, a function_call_output answering no call, a bad value of a
/// known field, "background": true, "conversation", "prompt").
Status responses_to_chat(const Json& b, const ApiDefaults& d, ResponsesRequest* out);

/// `st` with the chat-completions field names in its message renamed to the Responses API's
/// (response_format -> text.format, tools[i].function.x -> tools[i].x, 'messages' -> 'input'),
/// and a message that starts with a field path quoted; ok stays ok.
Status in_responses_terms(const Status& st);

}  // namespace mnemo::server
