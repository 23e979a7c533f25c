// Why a server request failed, and the one mapping of those failures to the wire: a Status from
// the engine, the memory or a parser becomes an ErrorKind (error_kind_for), and an ErrorKind
// becomes an HTTP status code and an error type (http_error). The loop thread does the first
// step, the HTTP threads the second; every other file of src/server goes through these two.
#pragma once

#include <cstdint>

#include "mnemo/status.h"

namespace mnemo::server {

/// Why a request failed. Each maps to one HTTP status (http_error).
enum class ErrorKind : uint8_t {
  kInvalidRequest = 0,  // 400: malformed JSON, a bad field, a bad slot file name
  kUnauthorized,        // 401: missing or wrong API key
  kNotFound,            // 404: no such route, slot or file
  kBusy,                // 409: the slot is processing a request
  kPromptTooLong,       // 400: the prompt cannot fit in a slot's context
  kCacheFull,           // 503: not enough free KV cells now
  kQueueFull,           // 503: too many requests waiting
  kTimeout,             // 503: waited longer than --timeout for a slot
  kNotSupported,        // 501: a disabled or not yet available feature
  kInternal,            // 500: a decode or I/O failure
  kBodyTooLarge,        // 413: a request body over --max-body
  kCount,
};

/// "invalid_request", "unauthorized", "not_found", "busy", "too_large", "cache_full",
/// "queue_full", "timeout", "not_supported", "internal", "body_too_large" (Prometheus label
/// values).
const char* error_kind_name(ErrorKind kind);

/// What an ErrorKind is on the wire.
struct HttpError {
  int status = 500;                   // HTTP status code
  const char* type = "server_error";  // "type" of the {"error": {...}} body (OpenAI's names)
};

/// kInvalidRequest 400 invalid_request_error, kUnauthorized 401 authentication_error,
/// kNotFound 404 not_found_error, kBusy 409 invalid_request_error, kPromptTooLong 400
/// exceed_context_size_error (as llama-server), kBodyTooLarge 413 invalid_request_error,
/// kCacheFull / kQueueFull / kTimeout 503 unavailable_error, kNotSupported 501
/// not_supported_error, kInternal 500 server_error.
HttpError http_error(ErrorKind kind);

/// The ErrorKind of an error cpp-httplib answers by itself, from the status it chose: 404 (no
/// route) kNotFound, 413 (body over --max-body) kBodyTooLarge, any other kInvalidRequest.
ErrorKind error_kind_for_http_status(int status);

/// What produced a Status. The same code is the client's fault in one place and the server's in
/// another (NotSupported: a slot file of a newer version vs. a memory that cannot requantize).
enum class ErrorOrigin : uint8_t {
  kRequest,      // parsing a request body (HTTP thread)
  kSlotRestore,  // restoring a slot file the client named
  kSlotSave,     // writing a slot file
  kRequantize,   // converting K/V to the types the client asked for
  kDecode,       // decoding a batch, or a memory operation of the loop
};

/// The ErrorKind of a failed Status (st must not be ok):
///   kRequest      OutOfRange (a prompt of n_ctx_seq tokens or more) kPromptTooLong; NotFound
///                 (a stored response the request names) kNotFound; NotSupported (what the
///                 model cannot do, e.g. /infill without FIM tokens) kNotSupported; any other
///                 kInvalidRequest.
///   kSlotRestore  NoSpace kCacheFull; IOError, Internal kInternal; any other (a missing,
///                 bad, damaged, newer or other model's file) kInvalidRequest (llama-server's
///                 400).
///   kSlotSave     NotSupported kNotSupported; any other kInternal.
///   kRequantize   NotSupported kNotSupported; InvalidArgument kInvalidRequest; NoSpace
///                 kCacheFull; any other kInternal.
///   kDecode       NoSpace kCacheFull; any other kInternal.
ErrorKind error_kind_for(const Status& st, ErrorOrigin origin);

}  // namespace mnemo::server
