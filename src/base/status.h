// Status and Result<T>: how errors the environment or a user can cause travel.
//
// A bad file, a bad config or a short read is not a bug, so it must not abort: functions return a
// Status (or a Result<T> carrying a value) whose message names the file, tensor or field and says
// what is wrong. Invariants that only a programmer can break use DF_CHECK (check.h) instead.
// g++ 12 in C++20 mode has no std::expected, hence this small type.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace deltafin {

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  const std::string& message() const {
    static const std::string kOk = "ok";
    return message_ ? *message_ : kOk;
  }
  // Prefixes context ("loading model: ...") so the final line reads outside-in.
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(context + ": " + *message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "Result constructed from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace deltafin

#define DF_CONCAT_INNER(a, b) a##b
#define DF_CONCAT(a, b) DF_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` failed.
#define DF_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::deltafin::Status df_status_ = (expr);  \
    if (!df_status_.ok()) return df_status_; \
  } while (0)

// `DF_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a Result or returns its Status.
// NOLINTBEGIN(bugprone-macro-parentheses): `tmp` and `lhs` are declarations; parentheses break them
#define DF_ASSIGN_OR_RETURN(lhs, expr) \
  DF_ASSIGN_OR_RETURN_IMPL(DF_CONCAT(df_result_, __LINE__), lhs, expr)
#define DF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
