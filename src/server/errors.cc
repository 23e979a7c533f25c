#include "server/errors.h"

namespace mnemo::server {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidRequest:
      return "invalid_request";
    case ErrorKind::kUnauthorized:
      return "unauthorized";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kBusy:
      return "busy";
    case ErrorKind::kPromptTooLong:
      return "too_large";
    case ErrorKind::kCacheFull:
      return "cache_full";
    case ErrorKind::kQueueFull:
      return "queue_full";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kNotSupported:
      return "not_supported";
    case ErrorKind::kInternal:
      return "internal";
    case ErrorKind::kBodyTooLarge:
      return "body_too_large";
    case ErrorKind::kCount:
      break;
  }
  return "unknown";
}

HttpError http_error(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidRequest:
      return {400, "invalid_request_error"};
    case ErrorKind::kUnauthorized:
      return {401, "authentication_error"};
    case ErrorKind::kNotFound:
      return {404, "not_found_error"};
    case ErrorKind::kBusy:
      return {409, "invalid_request_error"};
    case ErrorKind::kPromptTooLong:
      return {400, "exceed_context_size_error"};
    case ErrorKind::kBodyTooLarge:
      return {413, "invalid_request_error"};
    case ErrorKind::kCacheFull:
    case ErrorKind::kQueueFull:
    case ErrorKind::kTimeout:
      return {503, "unavailable_error"};
    case ErrorKind::kNotSupported:
      return {501, "not_supported_error"};
    case ErrorKind::kInternal:
    case ErrorKind::kCount:
      break;
  }
  return {500, "server_error"};
}

ErrorKind error_kind_for_http_status(int status) {
  switch (status) {
    case 404:
      return ErrorKind::kNotFound;
    case 413:
      return ErrorKind::kBodyTooLarge;
    default:
      return ErrorKind::kInvalidRequest;
  }
}

ErrorKind error_kind_for(const Status& st, ErrorOrigin origin) {
  const StatusCode code = st.code();
  switch (origin) {
    case ErrorOrigin::kRequest:
      switch (code) {
        case StatusCode::kOutOfRange:
          return ErrorKind::kPromptTooLong;
        case StatusCode::kNotSupported:
          return ErrorKind::kNotSupported;
        case StatusCode::kNotFound:
          return ErrorKind::kNotFound;
        default:
          return ErrorKind::kInvalidRequest;
      }
    case ErrorOrigin::kSlotRestore:
      switch (code) {
        case StatusCode::kNoSpace:
          return ErrorKind::kCacheFull;
        case StatusCode::kIOError:
        case StatusCode::kInternal:
          return ErrorKind::kInternal;
        default:
          // A bad, damaged, newer or other model's file is the client's problem.
          return ErrorKind::kInvalidRequest;
      }
    case ErrorOrigin::kSlotSave:
      return code == StatusCode::kNotSupported ? ErrorKind::kNotSupported : ErrorKind::kInternal;
    case ErrorOrigin::kRequantize:
      switch (code) {
        case StatusCode::kNotSupported:
          return ErrorKind::kNotSupported;
        case StatusCode::kInvalidArgument:
          return ErrorKind::kInvalidRequest;
        case StatusCode::kNoSpace:
          return ErrorKind::kCacheFull;
        default:
          return ErrorKind::kInternal;
      }
    case ErrorOrigin::kDecode:
      return code == StatusCode::kNoSpace ? ErrorKind::kCacheFull : ErrorKind::kInternal;
  }
  return ErrorKind::kInternal;
}

}  // namespace mnemo::server
