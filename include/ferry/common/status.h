// Status and Result<T>: errors as values at library boundaries.
//
// A Status is either ok or carries a Code a caller can act on and a message
// for humans. Result<T> holds a T or a non-ok Status. Both are [[nodiscard]].
// Neither allocates when ok.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "ferry/common/assert.h"

namespace ferry {

enum class Code : uint8_t {
  kOk = 0,
  kInvalidArgument,     // caller passed something malformed; fix the call
  kOutOfRange,          // address/length outside a region or queue bounds
  kPermissionDenied,    // access flags do not allow the operation
  kNotFound,            // unknown key, handle, group or file
  kResourceExhausted,   // a bounded queue or pool is full; retry later
  kFailedPrecondition,  // object is in the wrong state (e.g. QP not in RTS)
  kAlreadyExists,
  kUnavailable,         // peer or device not reachable / engine stopped
  kTimedOut,
  kDataLoss,            // persistent data found corrupt
  kInternal,            // a bug; reported rather than crashing where possible
  kUnimplemented,
};

std::string_view code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK" or "<code name>: <message>".
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status out_of_range(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
inline Status permission_denied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
inline Status not_found(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
inline Status unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status already_exists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
inline Status timed_out(std::string m) { return {Code::kTimedOut, std::move(m)}; }
inline Status data_loss(std::string m) { return {Code::kDataLoss, std::move(m)}; }
inline Status internal_error(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status unimplemented(std::string m) { return {Code::kUnimplemented, std::move(m)}; }

// Result<T>: a value or a non-ok Status. Accessing value() of an error is a
// contract violation (asserts).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    FERRY_ASSERT(!std::get<Status>(v_).ok(), "Result built from an ok Status without a value");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    FERRY_ASSERT(ok(), "value() of an error Result: ", status().to_string());
    return std::get<T>(v_);
  }
  const T& value() const& {
    FERRY_ASSERT(ok(), "value() of an error Result: ", status().to_string());
    return std::get<T>(v_);
  }
  T&& value() && {
    FERRY_ASSERT(ok(), "value() of an error Result: ", status().to_string());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ferry

// Propagates a non-ok Status from an expression returning Status.
#define FERRY_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::ferry::Status ferry_status_ = (expr);    \
    if (!ferry_status_.ok()) return ferry_status_; \
  } while (0)

#define FERRY_CONCAT_INNER_(a, b) a##b
#define FERRY_CONCAT_(a, b) FERRY_CONCAT_INNER_(a, b)
// `FERRY_ASSIGN_OR_RETURN(auto x, f());` declares x from a Result or returns its Status.
#define FERRY_ASSIGN_OR_RETURN(decl, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL_(FERRY_CONCAT_(ferry_result_, __LINE__), decl, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  decl = std::move(tmp).value()
