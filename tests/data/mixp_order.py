#!/usr/bin/env python3
"""Pure-Python twin of mixp's data order (include/mixp/data/random.h, batch_sampler.h).

It lets a peer script (PyTorch, numpy) visit the samples in exactly the order `mixp train` does,
and it is the independent oracle for the permutation pinned in test_batch_sampler.cpp:

    python3 tests/data/mixp_order.py 10 42 0    ->  the epoch-0 order of 10 samples for seed 42
"""
import sys

M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def derive_seed(seed, stream):
    return splitmix64(splitmix64(seed) ^ stream)


class MT19937_64:
    """std::mt19937_64 as the C++ standard specifies it ([rand.predef])."""

    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & M64
        for i in range(1, 312):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & M64
        self.i = 312

    def __call__(self):
        if self.i >= 312:
            upper, lower = 0xFFFFFFFF80000000, 0x7FFFFFFF
            for k in range(312):
                y = (self.mt[k] & upper) | (self.mt[(k + 1) % 312] & lower)
                v = self.mt[(k + 156) % 312] ^ (y >> 1)
                if y & 1:
                    v ^= 0xB5026F5AA96619E9
                self.mt[k] = v
            self.i = 0
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & M64


def uniform_below(rng, n):
    threshold = (1 << 64) % n  # as C++ (0 - n) % n on uint64
    while True:
        x = rng()
        if x >= threshold:
            return x % n


def permutation(n, seed, epoch, shuffle=True):
    p = list(range(n))
    if shuffle:
        rng = MT19937_64(derive_seed(seed, epoch))
        for i in range(n, 1, -1):
            j = uniform_below(rng, i)
            p[i - 1], p[j] = p[j], p[i - 1]
    return p


if __name__ == "__main__":
    g = MT19937_64(5489)  # the default seed; the standard fixes the 10000th output
    for _ in range(9999):
        g()
    assert g() == 9981545732273789042
    n, seed, epoch = (int(a) for a in sys.argv[1:4])
    print(permutation(n, seed, epoch))
