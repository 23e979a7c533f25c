// Status and Result<T>: how mnemo reports errors caused by outside input.
//
// Error tiers (docs/contributing.md, "Errors"):
//   - a broken internal invariant          -> CHECK / DCHECK (include/mnemo/check.h)
//   - bad outside input (files, requests)  -> Status / Result<T>, message names cause and offset
//   - a capacity outcome                   -> a typed enum (e.g. MemoryStatus::kNoSpace)
// No exceptions are thrown from src/; a library's exceptions are caught at the boundary.
//
// A Status is cheap to copy when ok (no allocation); an error carries a code and a message.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "mnemo/check.h"

namespace mnemo {

/// Broad class of an error, so callers (the server) can map it to a response code.
enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,  // a bad request, flag or parameter value
  kNotFound,         // a missing file, key, tensor or sequence
  kCorruption,       // a malformed or damaged file (GGUF, state file)
  kNotSupported,     // valid input we cannot handle (a tensor type, an architecture)
  kOutOfRange,       // a value past a limit (a position, a size)
  kNoSpace,          // a full cache or buffer
  kIOError,          // the operating system refused a read, write, open or mmap
  kAborted,          // the caller asked to stop
  kInternal,         // a bug: should not happen
};

/// Human-readable name of a code ("Corruption", "NotFound", ...).
std::string_view status_code_name(StatusCode code);

/// Outcome of an operation: ok, or a code plus a message naming the cause.
class [[nodiscard]] Status {
 public:
  /// The ok status.
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  static Status invalid_argument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status not_supported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }
  static Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status no_space(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
  static Status io_error(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  /// "Corruption: tensor 'x' ends past the file (offset 1234)" or "OK".
  std::string to_string() const;

  /// Returns a copy whose message is prefixed with `context + ": "` (ok stays ok).
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// A value of type T, or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    CHECK(!std::get<Status>(v_).ok()) << "Result constructed from an ok Status without a value";
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  /// The error; an ok Status when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  T& value() & {
    CHECK(ok()) << "Result::value() on error: " << std::get<Status>(v_).to_string();
    return std::get<T>(v_);
  }
  const T& value() const& {
    CHECK(ok()) << "Result::value() on error: " << std::get<Status>(v_).to_string();
    return std::get<T>(v_);
  }
  T&& value() && {
    CHECK(ok()) << "Result::value() on error: " << std::get<Status>(v_).to_string();
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace mnemo

/// Returns the Status of `expr` from the enclosing function if it is not ok.
#define MNEMO_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::mnemo::Status _mnemo_st = (expr);    \
    if (!_mnemo_st.ok()) return _mnemo_st; \
  } while (0)

#define MNEMO_CONCAT_INNER_(a, b) a##b
#define MNEMO_CONCAT_(a, b) MNEMO_CONCAT_INNER_(a, b)

/// `MNEMO_ASSIGN_OR_RETURN(auto x, f());` — binds the value of a Result or returns its Status.
#define MNEMO_ASSIGN_OR_RETURN(lhs, expr) \
  MNEMO_ASSIGN_OR_RETURN_IMPL_(MNEMO_CONCAT_(_mnemo_r_, __LINE__), lhs, expr)
#define MNEMO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
