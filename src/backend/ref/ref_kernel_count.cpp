// The RefBackend kernel counter (ref_backend.h): relaxed, since only its change across one
// single-threaded test call is read.
#include <atomic>

#include "backend/ref/ref_backend.h"

namespace mixp {
namespace {
std::atomic<uint64_t> g_ref_kernel_calls{0};
std::atomic<const char*> g_last_ref_kernel{""};
}  // namespace

uint64_t ref_kernel_calls() { return g_ref_kernel_calls.load(std::memory_order_relaxed); }
const char* last_ref_kernel() { return g_last_ref_kernel.load(std::memory_order_relaxed); }
void count_ref_kernel(const char* name) {
  g_last_ref_kernel.store(name, std::memory_order_relaxed);
  g_ref_kernel_calls.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace mixp
