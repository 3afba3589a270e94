// Where the tests find the source tree, the build tree, the golden data and the built CLI.
// The paths are defined in one generated file per build (cmake/MixpTargets.cmake writes
// test_paths.cpp into the build folder) rather than as -D flags on every test file: an absolute
// path in a flag is part of ccache's hash, so every other worktree or checkout recompiled every
// test file. With the paths behind these functions a test file compiles to the same object
// wherever the tree lives.
#pragma once

namespace mixp::test_paths {
const char* source_dir();  // the project's root
const char* binary_dir();  // the build folder
const char* test_data();   // tests/golden
const char* cli();         // the built `mixp`
}  // namespace mixp::test_paths

#define MIXP_SOURCE_DIR (::mixp::test_paths::source_dir())
#define MIXP_BINARY_DIR (::mixp::test_paths::binary_dir())
#define MIXP_TEST_DATA (::mixp::test_paths::test_data())
#define MIXP_CLI (::mixp::test_paths::cli())
