// A seeded, counter-based random generator: every random tensor comes from an explicit Generator,
// so a run is reproducible from its seeds alone (no hidden global state).
//
// Definition (stable; tests and checkpoints rely on it):
//   next_u64()   = splitmix64(seed + counter * 0x9E3779B97F4A7C15), then counter += 1
//   uniform01()  = (next_u64() >> 11) * 2^-53, a double in [0, 1)
//   normal()     = Box-Muller on u1 = 1 - uniform01(), u2 = uniform01():
//                  sqrt(-2 ln u1) * cos(2 pi u2)   (one normal per two draws; no caching, so the
//                  stream position is always 2 draws per normal)
// Tensors are filled in row-major order, one element after the other, in double precision and
// rounded to the tensor's dtype with nearest-even.
#pragma once
#include <cstdint>

namespace mixp {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t counter() const { return counter_; }
  void set_state(uint64_t seed, uint64_t counter) {
    seed_ = seed;
    counter_ = counter;
  }
  uint64_t next_u64() { return splitmix64(seed_ + (counter_++) * 0x9E3779B97F4A7C15ULL); }
  double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double normal();

  static constexpr uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t seed_ = 0;
  uint64_t counter_ = 0;
};

}  // namespace mixp
