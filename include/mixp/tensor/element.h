// Reading and writing one element of any registered dtype through double. This is the slow,
// obviously correct path used by item()/at()/to_vector(), by the ref backend's conversions and by
// the generic fallback of Tensor::to; bulk paths specialize the common pairs.
#pragma once
#include <cstdint>

#include "mixp/format/dtype.h"
#include "mixp/format/rounding.h"

namespace mixp {

// The value of element `i` of a buffer of dtype `dt`. Integers and bool convert exactly (int64
// beyond 2^53 rounds). nf4 throws std::invalid_argument (it needs its block scale: quant module).
double load_element(const void* base, DType dt, int64_t i);

// Stores v into element `i`. Floating formats round as named (`random_bits` is read only by
// Round::stochastic) with `overflow`; integers round as named and saturate to their range (NaN
// stores 0); bool stores v != 0. e8m0 and nf4 throw std::invalid_argument.
void store_element(void* base, DType dt, int64_t i, double v, Round round, Overflow overflow,
                   uint32_t random_bits);

// Whether every value of `from` is exactly representable in `to` (so to(DType) needs no Round).
bool is_exact_conversion(DType from, DType to);

}  // namespace mixp
