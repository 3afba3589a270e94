// Deterministic randomness for data order. Everything here is specified bit for bit, so a seed
// gives the same batches with any compiler and standard library:
//  - std::mt19937_64 is fully specified by the C++ standard (its 10000th output is fixed).
//  - std::uniform_int_distribution and std::shuffle are NOT (libstdc++ and libc++ differ), so we
//    use our own unbiased bounded draw and an explicit Fisher–Yates shuffle.
//  - Per-stream seeds (one per epoch, one per text batch) come from SplitMix64 (Steele, Lea and
//    Flood 2014, the generator Java's SplittableRandom and xoshiro's seeding use), so a stream can
//    be recreated from (seed, index) alone: resuming needs no generator state in the checkpoint.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace mixp::data {

// One SplitMix64 output step applied to x (a bijection on 64-bit values).
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Seed of sub-stream `stream` of `seed` (e.g. the epoch of a shuffle). Distinct streams of one seed
// get distinct seeds because both steps are bijections.
constexpr uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  return splitmix64(splitmix64(seed) ^ stream);
}

// Uniform integer in [0, n), n >= 1, without modulo bias: reject the lowest 2^64 mod n raw values
// so that the accepted range is a multiple of n.
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const uint64_t x = rng();
    if (x >= threshold) return x % n;
  }
}

// Fisher–Yates (Durstenfeld): for i = n-1 down to 1 swap a[i] with a[uniform_below(i+1)].
template <class T>
void fisher_yates_shuffle(std::span<T> a, std::mt19937_64& rng) {
  for (size_t i = a.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(uniform_below(rng, i));
    using std::swap;
    swap(a[i - 1], a[j]);
  }
}

}  // namespace mixp::data
