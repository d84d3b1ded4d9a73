// lowbit's error types. The library reports every failure by throwing one of these; only apps/
// translates them into exit codes (CLI) or HTTP statuses (server). Messages name the file, tensor
// or field at fault so that one line is enough to fix the input.
#pragma once

#include <stdexcept>
#include <string>

namespace lowbit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller's input is wrong: a malformed file, a bad flag, an out-of-range id. CLI exit code 2.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Well-formed input that lowbit does not implement (an architecture, a dtype, a method).
class Unsupported : public Error {
 public:
  using Error::Error;
};

// The operating system refused: a file that cannot be opened, read, mapped or written.
class IoError : public Error {
 public:
  using Error::Error;
};

class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// A broken invariant inside lowbit: a bug, never the user's fault.
class Internal : public Error {
 public:
  using Error::Error;
};

}  // namespace lowbit

// Throws ExceptionType(message) when cond is false. message may be any expression convertible to
// std::string; it is evaluated only on failure.
#define LOWBIT_CHECK_AS(ExceptionType, cond, message) \
  do {                                                \
    if (!(cond)) throw ExceptionType(message);        \
  } while (0)

#define LOWBIT_CHECK(cond, message) LOWBIT_CHECK_AS(::lowbit::InvalidArgument, cond, message)
