// The machine a study ran on, for the report's title and results.json.
#include <sys/utsname.h>

#include <thread>

#include "mixp/format/cpu_features.h"
#include "mixp/study/study_results.h"

namespace mixp::study {

MachineInfo describe_this_machine(int threads) {
  MachineInfo m;
  const CpuFeatures& f = cpu_features();
  m.cpu_model = f.model.empty() ? f.vendor : f.model;
  m.cpu_features = f.names();
  m.threads = threads > 0 ? threads : int(std::thread::hardware_concurrency());
  struct utsname u {};
  if (::uname(&u) == 0) {
    m.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
  }
  return m;
}

}  // namespace mixp::study
