// host_parallel_for (mixp/backend/host_parallel.h): the cpu backend's parallel_for behind a
// function pointer, so the quant runtime splits its loops as the backend does.
#include "mixp/backend/host_parallel.h"

#include "backend/cpu/cpu_parallel.h"

namespace mixp {

void host_parallel_for_fn(int64_t n, int64_t work, void (*fn)(void*, int64_t, int64_t),
                          void* ctx) {
  cpu::parallel_for(n, work, [fn, ctx](int64_t lo, int64_t hi) { fn(ctx, lo, hi); });
}

}  // namespace mixp
