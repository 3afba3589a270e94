// The data tests' check that a call is refused with a DataError, and with which message.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "mixp/data/error.h"

namespace mixp::data::testing {

// The message of the DataError that f() throws; a test failure (and "") if it throws none.
template <class F>
std::string data_error(F&& f) {
  try {
    f();
  } catch (const mixp::data::DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a DataError";
  return "";
}

}  // namespace mixp::data::testing
