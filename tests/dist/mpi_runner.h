// Runs the built `mixp` under mpirun (Debian's OpenMPI, installed by scripts/bootstrap.sh) for the
// data-parallel tests, capturing exit code, stdout and stderr.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "common/cli_runner.h"
#include "common/temp_dir.h"

namespace mixp::test {

// `ranks` processes of `mixp ARGS`; more ranks than cores are allowed (--oversubscribe), and
// waiting ranks yield the core (mpi_yield_when_idle) so that oversubscribed runs stay quick. As
// root (CI), OpenMPI needs the two ALLOW_RUN_AS_ROOT variables. `mpmd` is appended after the
// command: " : -np 1 mixp ..." runs another program (or other flags) as the last ranks.
inline CliResult run_mpi(int ranks, const std::string& args, const std::string& mpmd = "",
                         const std::string& cwd = "") {
  TempDir dir;
  const std::string cmd =
      (cwd.empty() ? "" : "cd '" + cwd + "' && ") +
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 "
      "timeout 300 mpirun --oversubscribe -np " +
      std::to_string(ranks) + " '" + MIXP_CLI + "' " + args + mpmd + " >'" +
      (dir / "out").string() + "' 2>'" + (dir / "err").string() + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(dir / "out");
  r.err = read_text(dir / "err");
  return r;
}

}  // namespace mixp::test
