// Runs the built `mixp` under mpirun (Debian's OpenMPI, installed by scripts/bootstrap.sh) for the
// data-parallel tests, capturing exit code, stdout and stderr.
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/cli_runner.h"
#include "common/test_paths.h"

namespace mixp::test {

// `ranks` processes of `mixp ARGS`; more ranks than cores are allowed (--oversubscribe), and
// waiting ranks yield the core (mpi_yield_when_idle) so that oversubscribed runs stay quick. As
// root (CI), OpenMPI needs the two ALLOW_RUN_AS_ROOT variables. `mpmd` is appended after the
// command: " : -np 1 mixp ..." runs another program (or other flags) as the last ranks.
// `mpirun_options` go to mpirun itself (e.g. "--mca btl tcp,self").
inline CliResult run_mpi(int ranks, const std::string& args, const std::string& mpmd = "",
                         const std::string& mpirun_options = "") {
  return run_shell(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 "
      "timeout 300 mpirun --oversubscribe " +
      mpirun_options + " -np " + std::to_string(ranks) + " '" + MIXP_CLI + "' " + args + mpmd);
}

// The per-step losses of a --log file (one JSON object per optimizer step).
inline std::vector<double> log_losses(const std::filesystem::path& log) {
  std::ifstream in(log);
  std::vector<double> out;
  for (std::string line; std::getline(in, line);) {
    out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  }
  return out;
}

}  // namespace mixp::test
