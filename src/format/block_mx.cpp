// OCP MX v1.0 block quantization; see include/mixp/format/block_mx.h for the rules and the
// layout, and docs/formats.md "OCP Microscaling" for the facts they follow.
#include "mixp/format/block_mx.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/block_common.h"
#include "mixp/format/convert.h"
#include "mixp/format/float_codec.h"

namespace mixp {
namespace {

// emax: OCP MX v1.0 table 1 ("Emax" of each element type), microxcaling formats.py.
constexpr MxElementInfo kInfo[] = {
    {MxElement::fp8_e4m3, DType::fp8_e4m3, "mxfp8_e4m3", 8, 8, 448.0},
    {MxElement::fp8_e5m2, DType::fp8_e5m2, "mxfp8_e5m2", 8, 15, 57344.0},
    {MxElement::fp6_e2m3, DType::fp6_e2m3, "mxfp6_e2m3", 6, 2, 7.5},
    {MxElement::fp6_e3m2, DType::fp6_e3m2, "mxfp6_e3m2", 6, 4, 28.0},
    {MxElement::fp4_e2m1, DType::fp4_e2m1, "mxfp4", 4, 2, 6.0},
    {MxElement::int8, DType::int8, "mxint8", 8, 0, 127.0 / 64.0},
};

// mx_info and the code tables index kInfo by the enum's value.
constexpr bool info_in_enum_order() {
  for (size_t i = 0; i < std::size(kInfo); ++i) {
    if (static_cast<size_t>(kInfo[i].element) != i) return false;
  }
  return true;
}
static_assert(info_in_enum_order());

const FloatFormat& float_format_of(MxElement e) {
  switch (e) {
    case MxElement::fp8_e4m3:
      return kFp8E4M3;
    case MxElement::fp8_e5m2:
      return kFp8E5M2;
    case MxElement::fp6_e2m3:
      return kFp6E2M3;
    case MxElement::fp6_e3m2:
      return kFp6E3M2;
    case MxElement::fp4_e2m1:
      return kFp4E2M1;
    case MxElement::int8:
      break;
  }
  throw std::logic_error("MXINT8 has no float format");
}

// 2^e as a double, exactly, for |e| <= 1022 (MX needs [-127, 127]); cheaper than ldexp.
double pow2(int e) {
  return std::bit_cast<double>(static_cast<uint64_t>(e + 1023) << 52);
}

constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kInfBits = 0x7F800000u;

// floor(log2(a)) of a positive finite fp32 given its bits, exactly.
int floor_log2_bits(uint32_t a) {
  const int field = static_cast<int>(a >> 23);
  if (field != 0) return field - 127;
  const uint32_t m = a & 0x7FFFFF;  // subnormal: a = m * 2^-149
  return (31 - std::countl_zero(m)) - 149;
}

void check_layout(int64_t n, int64_t row_len, int block_size) {
  if (block_size <= 0) {
    throw std::invalid_argument("MX block size must be positive (got " +
                                std::to_string(block_size) + "); the OCP default is 32");
  }
  if (row_len < 0 || (n > 0 && (row_len == 0 || n % row_len != 0))) {
    throw std::invalid_argument("MX row length " + std::to_string(row_len) +
                                " does not divide the element count " + std::to_string(n) +
                                "; pass the tensor's last dimension");
  }
}

void store_code(uint8_t* data, MxElement e, int64_t i, uint32_t code) {
  if (e == MxElement::fp4_e2m1) {
    detail::put_nibble(data, i, code, /*low_first=*/true);
  } else {
    data[i] = static_cast<uint8_t>(code);
  }
}

uint32_t load_code(const uint8_t* data, MxElement e, int64_t i) {
  switch (e) {
    case MxElement::fp4_e2m1:
      return detail::get_nibble(data, i, /*low_first=*/true);
    case MxElement::fp6_e2m3:
    case MxElement::fp6_e3m2:
      return data[i] & 0x3Fu;  // the top two bits are padding
    default:
      return data[i];
  }
}

// Visits every block: fn(begin, length, block_index).
template <class Fn>
void for_each_block(int64_t n, int64_t row_len, int block_size, Fn&& fn) {
  if (n == 0) return;
  const int64_t rows = n / row_len;
  const int64_t per_row = (row_len + block_size - 1) / block_size;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < per_row; ++j) {
      const int64_t begin = r * row_len + j * block_size;
      const int64_t len = std::min<int64_t>(block_size, row_len - j * block_size);
      fn(begin, len, r * per_row + j);
    }
  }
}

// Quantizes one block: returns its scale and calls put(i, code) for each element.
template <class Put>
e8m0 quantize_one_block(const float* x, int64_t begin, int64_t len, MxElement e,
                        const MxOptions& opt, Put&& put) {
  const e8m0 s = mx_shared_scale(std::span<const float>(x + begin, static_cast<size_t>(len)), e);
  for (int64_t k = 0; k < len; ++k) {
    const int64_t i = begin + k;
    uint32_t code = 0;
    if (!s.is_nan()) {
      const double scaled = static_cast<double>(x[i]) * pow2(-s.exponent());  // exact
      const uint32_t rb =
          opt.round == Round::stochastic ? sr_bits(opt.seed, static_cast<uint64_t>(i)) : 0;
      code = mx_encode_element(e, scaled, opt.round, rb);
    }
    put(i, code);
  }
  return s;
}

// MXFP8 (fp8 elements) through the SIMD converters, over the OpenMP threads: the blocks in chunks
// of about kFp8Chunk values (consecutive blocks are contiguous in x: a row's blocks, then the
// next row's); per chunk first each block's scale from its amax, then, in pieces of at most
// kFp8Chunk values (a stack buffer; a block longer than that spans pieces), the scaled values
// x * 2^-scale in fp32 and one convert_f32_to call per piece (saturating; element i's random bits
// sr_bits(seed, i) through ConvertOptions::offset). The same codes as quantize_one_block's
// encode_float per element (tests/block/test_block_mx_fp8_path.cpp):
//  - the scale 2^-exponent is a normal fp32 (the exponent lies in [-127, 119] for E4M3's emax 8
//    and [-127, 112] for E5M2's 15), and x * 2^-exponent is exact in fp32 unless it falls below
//    fp32's normal range (2^-126), where any rounding of it stays far below half of E4M3's or
//    E5M2's smallest subnormal (2^-10, 2^-17): its code is a signed zero either way;
//  - convert_f32_to is encode_float element for element (convert.h), for every rounding;
//  - a block holding inf or NaN has the NaN scale and codes 0: its scaled values are set to +0.
// Python's mixp.quantize(x, "mxfp8_e4m3") runs here (docs/python.md "Speed").
constexpr int64_t kFp8Chunk = 16384;

void mx_quantize_fp8(uint8_t* d, uint8_t* scales, const float* x, int64_t n, int64_t row_len,
                     MxElement e, const MxOptions& opt) {
  if (n == 0) return;
  const int64_t bs = opt.block_size;
  const int64_t per_row = (row_len + bs - 1) / bs;
  const int64_t nb = (n / row_len) * per_row;
  const int64_t chunk_blocks = std::max<int64_t>(1, kFp8Chunk / bs);
  const int64_t chunks = (nb + chunk_blocks - 1) / chunk_blocks;
  const DType dtype = mx_info(e).dtype;
  const auto block_begin = [&](int64_t b) { return (b / per_row) * row_len + (b % per_row) * bs; };
  const auto block_end = [&](int64_t b) {
    return block_begin(b) + std::min<int64_t>(bs, row_len - (b % per_row) * bs);
  };
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b0 = c * chunk_blocks, b1 = std::min(nb, b0 + chunk_blocks);
    for (int64_t b = b0; b < b1; ++b) {
      // amax as ordered bits (finite below inf, NaN above), as mx_shared_scale(span) takes it;
      // signed compares vectorize on every x86-64 tier, and |x|'s bits are non-negative.
      int32_t amax = 0;
      for (int64_t i = block_begin(b), end = block_end(b); i < end; ++i) {
        amax = std::max(amax, static_cast<int32_t>(std::bit_cast<uint32_t>(x[i]) & kAbsMask));
      }
      scales[b] = mx_shared_scale(static_cast<uint32_t>(amax), e).bits;
    }
    alignas(64) float scaled[kFp8Chunk];
    int64_t b = b0;
    for (int64_t at = block_begin(b0), end = block_end(b1 - 1); at < end; at += kFp8Chunk) {
      const int64_t stop = std::min(end, at + kFp8Chunk);
      for (int64_t i = at; i < stop;) {
        while (block_end(b) <= i) ++b;
        const int64_t upto = std::min(stop, block_end(b));
        const e8m0 s{scales[b]};
        if (s.is_nan()) {
          std::fill(scaled + (i - at), scaled + (upto - at), 0.0f);
        } else {
          const float inv = std::bit_cast<float>(static_cast<uint32_t>(127 - s.exponent()) << 23);
          for (int64_t k = i; k < upto; ++k) scaled[k - at] = x[k] * inv;
        }
        i = upto;
      }
      convert_f32_to(dtype, std::span<const float>(scaled, static_cast<size_t>(stop - at)),
                     d + at,
                     ConvertOptions{opt.round, Overflow::saturate, opt.seed,
                                    static_cast<uint64_t>(at)});
    }
  }
}

// Decoded value of every code of every element type (the codec's decode_float, tabulated once).
struct CodeTables {
  double v[std::size(kInfo)][256];
  CodeTables() {
    for (const auto& info : kInfo) {
      for (uint32_t c = 0; c < 256; ++c) {
        v[static_cast<size_t>(info.element)][c] =
            c < (1u << info.bits) ? mx_decode_element(info.element, c) : 0.0;
      }
    }
  }
};
const CodeTables& code_tables() {
  static const CodeTables t;
  return t;
}

float decode_scaled(MxElement e, uint32_t code, e8m0 s) {
  if (s.is_nan()) return std::numeric_limits<float>::quiet_NaN();
  // Exact product in double (a few significant bits times a power of two), one fp32 rounding.
  return static_cast<float>(code_tables().v[static_cast<size_t>(e)][code] * pow2(s.exponent()));
}

}  // namespace

const MxElementInfo& mx_info(MxElement e) {
  return kInfo[static_cast<size_t>(e)];
}

e8m0 mx_shared_scale(uint32_t amax_bits, MxElement e) {
  amax_bits &= kAbsMask;
  if (amax_bits >= kInfBits) return e8m0{e8m0::kNaN};
  // amax == 0: the fp32 min normal's exponent, -126 (microxcaling's FP32_MIN_NORMAL convention).
  const int lg = amax_bits == 0 ? -126 : floor_log2_bits(amax_bits);
  return e8m0::from_exponent(lg - mx_info(e).emax);  // from_exponent clamps to [-127, 127]
}

e8m0 mx_shared_scale(std::span<const float> block, MxElement e) {
  uint32_t amax = 0;
  for (float v : block) {
    // |x| ordered as unsigned bits: finite values below inf, every NaN above it.
    amax = std::max(amax, std::bit_cast<uint32_t>(v) & kAbsMask);
  }
  return mx_shared_scale(amax, e);
}

uint32_t mx_encode_element(MxElement e, double scaled, Round round, uint32_t random_bits) {
  if (e != MxElement::int8) {
    return encode_float(float_format_of(e), scaled, round, Overflow::saturate, random_bits,
                        nullptr);
  }
  // MXINT8: q = round(scaled * 2^6) (exact scaling), saturated to [-127, 127].
  double q = detail::round_to_integer(scaled * 64.0, round, random_bits);
  q = std::clamp(q, -127.0, 127.0);
  return static_cast<uint8_t>(static_cast<int8_t>(q));
}

double mx_decode_element(MxElement e, uint32_t code) {
  if (e != MxElement::int8) return decode_float(float_format_of(e), code);
  return static_cast<double>(static_cast<int8_t>(static_cast<uint8_t>(code))) / 64.0;
}

int64_t mx_num_blocks(int64_t n, int64_t row_len, int block_size) {
  check_layout(n, row_len, block_size);
  if (n == 0) return 0;
  return (n / row_len) * ((row_len + block_size - 1) / block_size);
}

int64_t mx_data_bytes(MxElement e, int64_t n) {
  return e == MxElement::fp4_e2m1 ? (n + 1) / 2 : n;
}

void mx_quantize(std::span<uint8_t> data, std::span<uint8_t> scales, std::span<const float> x,
                 int64_t row_len, MxElement e, const MxOptions& opt) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t nb = mx_num_blocks(n, row_len, opt.block_size);
  if (static_cast<int64_t>(data.size()) != mx_data_bytes(e, n) ||
      static_cast<int64_t>(scales.size()) != nb) {
    throw std::invalid_argument("mx_quantize: " + std::string(mx_info(e).name) + " of " +
                                std::to_string(n) + " values needs " +
                                std::to_string(mx_data_bytes(e, n)) + " data bytes and " +
                                std::to_string(nb) + " scales; got " + std::to_string(data.size()) +
                                " and " + std::to_string(scales.size()));
  }
  if (!data.empty()) data.back() = 0;  // an odd fp4 count leaves the last high nibble as padding
  uint8_t* d = data.data();
  if (e == MxElement::fp8_e4m3 || e == MxElement::fp8_e5m2) {
    mx_quantize_fp8(d, scales.data(), x.data(), n, row_len, e, opt);
    return;
  }
  for_each_block(n, row_len, opt.block_size, [&](int64_t begin, int64_t len, int64_t b) {
    scales[static_cast<size_t>(b)] =
        quantize_one_block(x.data(), begin, len, e, opt, [&](int64_t i, uint32_t code) {
          store_code(d, e, i, code);
        }).bits;
  });
}

void mx_dequantize(std::span<float> out, std::span<const uint8_t> data,
                   std::span<const uint8_t> scales, int64_t row_len, MxElement e, int block_size) {
  const int64_t n = static_cast<int64_t>(out.size());
  const int64_t nb = mx_num_blocks(n, row_len, block_size);
  if (static_cast<int64_t>(data.size()) != mx_data_bytes(e, n) ||
      static_cast<int64_t>(scales.size()) != nb) {
    throw std::invalid_argument(
        "mx_dequantize: " + std::string(mx_info(e).name) + " of " + std::to_string(n) +
        " values needs " + std::to_string(mx_data_bytes(e, n)) + " data bytes and " +
        std::to_string(nb) + " scales; got " + std::to_string(data.size()) + " and " +
        std::to_string(scales.size()) + " (check the shape and block size)");
  }
  for_each_block(n, row_len, block_size, [&](int64_t begin, int64_t len, int64_t b) {
    const e8m0 s{scales[static_cast<size_t>(b)]};
    for (int64_t i = begin; i < begin + len; ++i) {
      out[static_cast<size_t>(i)] = decode_scaled(e, load_code(data.data(), e, i), s);
    }
  });
}

void mx_fake_quantize(std::span<float> x, int64_t row_len, MxElement e, const MxOptions& opt) {
  const int64_t n = static_cast<int64_t>(x.size());
  check_layout(n, row_len, opt.block_size);
  // Each block reads all its inputs (for the scale) before writing, so in place is safe; the
  // codes of a block are buffered because the scale is known only after the scan.
  std::vector<uint32_t> codes(static_cast<size_t>(opt.block_size));
  for_each_block(n, row_len, opt.block_size, [&](int64_t begin, int64_t len, int64_t) {
    const e8m0 s = quantize_one_block(x.data(), begin, len, e, opt, [&](int64_t i, uint32_t c) {
      codes[static_cast<size_t>(i - begin)] = c;
    });
    for (int64_t k = 0; k < len; ++k) {
      x[static_cast<size_t>(begin + k)] = decode_scaled(e, codes[static_cast<size_t>(k)], s);
    }
  });
}

}  // namespace mixp
