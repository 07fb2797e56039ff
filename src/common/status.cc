#include "ferry/common/status.h"

#include <cstdio>
#include <cstdlib>

namespace ferry {

std::string_view code_name(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kOutOfRange: return "OUT_OF_RANGE";
    case Code::kPermissionDenied: return "PERMISSION_DENIED";
    case Code::kNotFound: return "NOT_FOUND";
    case Code::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case Code::kFailedPrecondition: return "FAILED_PRECONDITION";
    case Code::kAlreadyExists: return "ALREADY_EXISTS";
    case Code::kUnavailable: return "UNAVAILABLE";
    case Code::kTimedOut: return "TIMED_OUT";
    case Code::kDataLoss: return "DATA_LOSS";
    case Code::kInternal: return "INTERNAL";
    case Code::kUnimplemented: return "UNIMPLEMENTED";
  }
  return "UNKNOWN";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string s(code_name(code_));
  s += ": ";
  s += message_;
  return s;
}

namespace detail {

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "ferry: assertion failed at %s:%d: %s%s%s\n", file, line, expr,
               msg.empty() ? "" : " -- ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail
}  // namespace ferry
