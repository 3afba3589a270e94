// The message of the exception of type E that `f` throws, or "(no error)": for tests that check
// what an error says. Another exception type propagates (and fails the test).
#pragma once
#include <string>

namespace mixp::test {

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace mixp::test
