// Range checks for the numeric flags of every command (issue 28 item 8). CLI11 2.1 converts
// integers with strtoll/strtoull and no ERANGE check, so "--batch 99999999999999999999" became
// INT64_MAX (and a segfault) and "--seed -1" became 2^64 - 1; this validator reads the text
// itself before CLI11 converts it: a decimal integer that fits the range, or a finite real in it.
// A value outside is a usage error (exit 2) that CLI11 words as "--flag: must be ..." so the
// message names the flag and the range (docs/cli.md "Numeric flags").
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>

namespace mixp::cli {

// The flag takes an integer in [lo, hi].
CLI::Option* int_range(CLI::Option* option, int64_t lo, int64_t hi);
// The same for an unsigned flag (a seed): [0, 2^64 - 1] when hi is UINT64_MAX.
CLI::Option* uint_range(CLI::Option* option, uint64_t hi);
// The flag takes a finite real in [lo, hi], or (lo, hi] when lo_open (a rate that must be
// positive).
CLI::Option* real_range(CLI::Option* option, double lo, double hi, bool lo_open = false);

}  // namespace mixp::cli

namespace mixp::cli {

// The flags several commands share (train, compare, plan, advise: --batch, --epochs, --steps,
// --grad-accum, --lr, --threads, --seed, the model shape, --train-limit, --test-limit) get one
// range each, wherever they appear; a command adds its own flags' ranges after this. Flags the
// command does not have are skipped.
void shared_flag_ranges(CLI::App& command);

}  // namespace mixp::cli
