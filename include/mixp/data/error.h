// The one exception type of the data module. It derives from std::runtime_error so callers that
// only catch std::exception still see the message; the message always names the file (or buffer),
// the byte offset or record where the problem is, and what to do about it
// (docs/architecture.md 6.11).
#pragma once
#include <stdexcept>
#include <string>

namespace mixp::data {

class DataError : public std::runtime_error {
 public:
  explicit DataError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace mixp::data
