// Tells AddressSanitizer which cached memory no tensor may touch. Private to libmixp.
//
// Why: under ASan every system allocation has redzones, but a cached block or a free part of a
// segment is memory ASan believes is in use, so a use-after-free of a tensor whose block went back
// to the cache, or an overrun into a free neighbour in the same segment, would go unseen. The
// allocator poisons blocks while they sit in its pools and unpoisons them when it hands them out
// (or returns them to the system). Without ASan both calls compile to nothing.
#pragma once
#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace mixp::detail {

inline void poison_cached(void* p, size_t n) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_POISON_MEMORY_REGION(p, n);
#else
  (void)p, (void)n;
#endif
}

inline void unpoison_cached(void* p, size_t n) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
  (void)p, (void)n;
#endif
}

}  // namespace mixp::detail
