// Internals of src/dist shared by its files.
#pragma once
#include <memory>

#include "mixp/dist/process_group.h"

namespace mixp::dist::detail {
// An environment variable as an int (`fallback` when unset or not a number).
int env_int(const char* name, int fallback);
std::unique_ptr<ProcessGroup> make_mpi_group();  // mpi_group.cpp
void mpi_abort(ProcessGroup& g, int code);
}  // namespace mixp::dist::detail
