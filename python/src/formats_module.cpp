// The `mixp._mixp` extension module (docs/python.md): mixp's number formats on NumPy arrays.
// Every function here is a thin shell over the library's own conversions (src/format/): the
// element-wise converters of include/mixp/format/convert.h, the scalar codec of float_codec.h for
// the 6- and 4-bit element formats, the block schemes of block_tensor.h and describe.h, so Python
// gets exactly the bits the C++ API and the CLI give. The pure-Python layer (python/mixp/) adds
// the keyword API, axes and the Quantized record.
//
// Contract at this boundary (docs/architecture.md 6.11 for the library side):
//  - arrays come in zero-copy when they are C-contiguous float32 (py::array::forcecast copies
//    anything else once) and go out as one new array;
//  - the GIL is released while the library works, so other Python threads run during large
//    conversions;
//  - every C++ exception becomes a Python one (translate_error below), never an abort.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixp/format/block_mx.h"
#include "mixp/format/block_tensor.h"
#include "mixp/format/convert.h"
#include "mixp/format/describe.h"
#include "mixp/format/dtype.h"
#include "mixp/format/float_codec.h"
#include "mixp/format/rounding.h"
#include "mixp/io/safetensors.h"
#include "bindings.h"

namespace py = pybind11;

namespace mixp::python {

using ByteArray = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

Round parse_rounding(const std::string& s) {
  // "nearest" is what PyTorch, ml_dtypes and Transformer Engine call round-to-nearest-even.
  if (s == "nearest") return Round::nearest_even;
  return parse_round(s);  // nearest_even, toward_zero, stochastic, nearest_away; throws otherwise
}

std::vector<int64_t> shape_of(const py::array& a) {
  return std::vector<int64_t>(a.shape(), a.shape() + a.ndim());
}

namespace {

// Elements per task: the fp32 chunk and its narrow copy stay in L1/L2 between the two passes.
constexpr int64_t kChunk = 16384;

// x rounded to `t` and widened back, chunk by chunk across the OpenMP threads. Chunks use
// offset = their first index, so stochastic rounding gives the same bits as one call
// (convert.h: ConvertOptions::offset).
void round_elementwise(DType t, const float* x, float* y, int64_t n, const ConvertOptions& opt) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * kChunk;
    const int64_t len = std::min(kChunk, n - b);
    alignas(64) uint8_t narrow[kChunk * 4];
    ConvertOptions o = opt;
    o.offset = opt.offset + static_cast<uint64_t>(b);
    const std::span<const float> src(x + b, static_cast<size_t>(len));
    convert_f32_to(t, src, narrow, o);
    convert_to_f32(t, narrow, std::span<float>(y + b, static_cast<size_t>(len)));
  }
}

// fp6/fp4 element formats at unit scale (what ml_dtypes' float6/float4 dtypes hold): the scalar
// codec, element i drawing sr_bits(seed, i) for stochastic rounding like the bulk converters.
void round_codec(DType t, const float* x, float* y, int64_t n, Round round, Overflow overflow,
                 uint64_t seed) {
  const FloatFormat f = traits(t).float_format();
#pragma omp parallel for schedule(static) if (n > kChunk)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t rb = round == Round::stochastic ? sr_bits(seed, static_cast<uint64_t>(i)) : 0;
    const uint32_t bits = encode_float(f, x[i], round, overflow, rb, nullptr);
    // Formats without NaN encode NaN as +0 (float_codec.h); round() promises NaN for NaN.
    y[i] = x[i] != x[i] ? x[i] : static_cast<float>(decode_float(f, bits));
  }
}

py::array_t<float> round_array(const FloatArray& x, const std::string& fmt,
                               const std::string& rounding, bool saturate, uint64_t seed) {
  const DType t = parse_dtype(fmt);
  if (!traits(t).is_float() || t == DType::fp64) {
    throw std::invalid_argument("round: '" + fmt +
                                "' is not an element-wise floating format; use one of " +
                                dtype_names(true) + " (block and integer formats: mixp.quantize)");
  }
  const ConvertOptions opt{parse_rounding(rounding),
                           saturate ? Overflow::saturate : Overflow::ieee, seed, 0};
  py::array_t<float> out(x.request().shape);
  const float* src = x.data();
  float* dst = out.mutable_data();
  const int64_t n = x.size();
  {
    py::gil_scoped_release nogil;
    if (is_elementwise_float(t)) {
      round_elementwise(t, src, dst, n, opt);
    } else {
      round_codec(t, src, dst, n, opt.round, opt.overflow, seed);
    }
  }
  return out;
}

// The element codes of x in `t`, one per element: uint16 for bf16/fp16, uint32 for tf32/fp32,
// uint8 for fp8 and (low bits of a byte, as ml_dtypes holds them) fp6/fp4.
py::array encode_array(const FloatArray& x, const std::string& fmt, const std::string& rounding,
                       bool saturate, uint64_t seed) {
  const DType t = parse_dtype(fmt);
  if (!traits(t).is_float() || t == DType::fp64) {
    throw std::invalid_argument("encode: '" + fmt + "' is not an element-wise floating format");
  }
  const ConvertOptions opt{parse_rounding(rounding),
                           saturate ? Overflow::saturate : Overflow::ieee, seed, 0};
  const auto shape = x.request().shape;
  const int bytes = traits(t).bits >= 32 ? 4 : traits(t).bits == 16 ? 2 : 1;
  py::array out = bytes == 4   ? py::array(py::array_t<uint32_t>(shape))
                  : bytes == 2 ? py::array(py::array_t<uint16_t>(shape))
                               : py::array(py::array_t<uint8_t>(shape));
  void* dst = out.mutable_data();
  const auto n = static_cast<size_t>(x.size());
  const float* src = x.data();
  {
    py::gil_scoped_release nogil;
    if (is_elementwise_float(t)) {
      convert_f32_to(t, std::span<const float>(src, n), dst, opt);
    } else {
      const FloatFormat f = traits(t).float_format();
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t rb = opt.round == Round::stochastic ? sr_bits(seed, i) : 0;
        d[i] = static_cast<uint8_t>(encode_float(f, src[i], opt.round, opt.overflow, rb, nullptr));
      }
    }
  }
  return out;
}

// The exact float32 values of element codes (encode's layout).
py::array_t<float> decode_array(const py::array& codes, const std::string& fmt) {
  const DType t = parse_dtype(fmt);
  if (!traits(t).is_float() || t == DType::fp64) {
    throw std::invalid_argument("decode: '" + fmt + "' is not an element-wise floating format");
  }
  const int bytes = traits(t).bits >= 32 ? 4 : traits(t).bits == 16 ? 2 : 1;
  if (codes.itemsize() != bytes || codes.dtype().kind() == 'f' || codes.dtype().kind() == 'c') {
    throw std::invalid_argument("decode: " + fmt + " codes are unsigned integers of " +
                                std::to_string(bytes) + " byte(s), as mixp.encode returns them");
  }
  const py::array c = py::array::ensure(codes, py::array::c_style);
  if (!c) throw std::invalid_argument("decode: codes must be an array");
  py::array_t<float> out(std::vector<py::ssize_t>(c.shape(), c.shape() + c.ndim()));
  const auto n = static_cast<size_t>(c.size());
  const void* src = c.data();
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    if (is_elementwise_float(t)) {
      convert_to_f32(t, src, std::span<float>(dst, n));
    } else {
      const FloatFormat f = traits(t).float_format();
      const uint32_t mask = (1U << traits(t).bits) - 1;
      for (size_t i = 0; i < n; ++i)
        dst[i] = static_cast<float>(decode_float(f, static_cast<const uint8_t*>(src)[i] & mask));
    }
  }
  return out;
}

template <class T>
py::array_t<uint8_t> bytes_array(const std::vector<T>& v) {
  py::array_t<uint8_t> a(static_cast<py::ssize_t>(v.size() * sizeof(T)));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
  return a;
}

// MXFP8 straight into the NumPy arrays returned (mx_quantize, the library's parallel SIMD path in
// src/format/block_mx.cpp): quantize_block's BlockTensor would be a second 1-byte-per-value buffer
// to fill and copy, and on a large array first touching those pages costs as much as the
// quantization itself. The same codes and scales as quantize_block (the layout is block_mx.h's
// either way); other schemes and a negative block size (quantize_block's error) take the
// general path below.
std::optional<py::dict> quantize_mxfp8(const FloatArray& x, const std::string& scheme,
                                       int block_size, Round round, uint64_t seed) {
  MxElement e;
  if (scheme == "mxfp8_e4m3") {
    e = MxElement::fp8_e4m3;
  } else if (scheme == "mxfp8_e5m2") {
    e = MxElement::fp8_e5m2;
  } else {
    return std::nullopt;
  }
  if (block_size < 0) return std::nullopt;
  BlockTensor t;  // the description only (block_scale_shape), no data
  t.scheme = scheme;
  t.shape = shape_of(x);
  t.block_size = block_size == 0 ? default_block_size(scheme) : block_size;
  t.element = mx_info(e).dtype;
  t.scale_dtype = DType::e8m0;
  const auto n = static_cast<int64_t>(x.size());
  const int64_t row = t.shape.empty() ? 1 : t.shape.back();
  py::array_t<uint8_t> data(static_cast<py::ssize_t>(mx_data_bytes(e, n)));
  py::array_t<uint8_t> scales(static_cast<py::ssize_t>(mx_num_blocks(n, row, t.block_size)));
  {
    py::gil_scoped_release nogil;
    mx_quantize(std::span<uint8_t>(data.mutable_data(), static_cast<size_t>(data.size())),
                std::span<uint8_t>(scales.mutable_data(), static_cast<size_t>(scales.size())),
                std::span<const float>(x.data(), static_cast<size_t>(n)), row, e,
                MxOptions{t.block_size, round, seed});
  }
  py::dict d;
  d["scheme"] = t.scheme;
  d["shape"] = t.shape;
  d["block_size"] = t.block_size;
  d["element"] = std::string(name(t.element));
  d["data"] = data;
  d["scale_dtype"] = std::string(name(t.scale_dtype));
  d["scales"] = scales;
  d["scale_shape"] = block_scale_shape(t);
  d["zero_points"] = t.zero_points;
  return d;
}

// quantize_block over x; the Python layer wraps the dict in mixp.Quantized (python/mixp/_formats.py).
py::dict quantize_array(const FloatArray& x, const std::string& scheme, int block_size,
                        const std::string& rounding, uint64_t seed) {
  const BlockSpec spec{scheme, block_size, parse_rounding(rounding), seed};
  if (auto d = quantize_mxfp8(x, scheme, block_size, spec.round, seed)) return *d;
  const std::vector<int64_t> shape = shape_of(x);
  BlockTensor t;
  {
    py::gil_scoped_release nogil;
    t = quantize_block(std::span<const float>(x.data(), static_cast<size_t>(x.size())), shape, spec);
  }
  py::dict d;
  d["scheme"] = t.scheme;
  d["shape"] = t.shape;
  d["block_size"] = t.block_size;
  d["element"] = std::string(name(t.element));
  d["data"] = bytes_array(t.data);
  d["scale_dtype"] = std::string(name(t.scale_dtype));
  d["scales"] = bytes_array(t.scales);
  d["scale_shape"] = block_scale_shape(t);
  d["zero_points"] = t.zero_points;
  return d;
}

py::array_t<float> dequantize_array(const std::string& scheme, const std::vector<int64_t>& shape,
                                    int block_size, const std::string& element,
                                    const ByteArray& data, const std::string& scale_dtype,
                                    const ByteArray& scales,
                                    const std::vector<int32_t>& zero_points) {
  if (!is_block_scheme(scheme)) {
    throw std::invalid_argument("dequantize: unknown scheme '" + scheme + "'");
  }
  BlockTensor t;
  t.scheme = scheme;
  t.shape = shape;
  t.block_size = block_size;
  t.element = parse_dtype(element);
  t.data.assign(data.data(), data.data() + data.size());
  t.scale_dtype = parse_dtype(scale_dtype);
  t.scales.assign(scales.data(), scales.data() + scales.size());
  t.zero_points = zero_points;
  const int64_t n = shape_numel(shape);  // throws on a negative dimension
  py::array_t<float> out(std::vector<py::ssize_t>(shape.begin(), shape.end()));
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    dequantize_block(t, std::span<float>(dst, static_cast<size_t>(n)));
  }
  return out;
}

bool is_unit_scale(DType t) {
  const DKind k = traits(t).kind;
  return k == DKind::integer || k == DKind::codebook;
}

// One entry of `mixp formats --json`'s "formats" list (tools/mixp/cmd_formats.cpp), with numbers
// as Python floats (inf and nan included) instead of the JSON strings "inf"/"nan".
py::dict stored_dict(const StoredValue& s) {
  py::dict d;
  d["format"] = std::string(name(s.format));
  d["value"] = s.value;
  d["bits"] = bits_hex(s.format, s.bits);
  d["fields"] = bit_fields(s.format, s.bits);
  d["abs_error"] = s.abs_error;
  d["rel_error"] = s.rel_error;
  d["status"] = std::string(to_string(s.status));
  d["unit_scale"] = is_unit_scale(s.format);
  return d;
}

double value_of(const py::handle& v) {
  if (py::isinstance<py::str>(v)) {
    const std::string text = v.cast<std::string>();
    const auto x = parse_real(text);
    if (!x) {
      throw std::invalid_argument("describe: cannot read '" + text +
                                  "' as a number (use decimal like -1.5e-3, hex-float like "
                                  "0x1.8p3, inf or nan)");
    }
    return *x;
  }
  if (py::isinstance<py::bool_>(v) || !(py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v) ||
                                        py::hasattr(v, "__float__"))) {
    throw std::invalid_argument("describe: value must be a number or a string, not " +
                                std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  return py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>();
}

std::vector<DType> describe_formats(const py::object& fmts) {
  std::vector<DType> out;
  if (fmts.is_none()) {
    const auto d = describe_default_formats();
    return {d.begin(), d.end()};
  }
  std::vector<std::string> names;
  if (py::isinstance<py::str>(fmts)) {
    names.push_back(fmts.cast<std::string>());
  } else {
    names = fmts.cast<std::vector<std::string>>();
  }
  for (const std::string& n : names) {
    const DType t = parse_dtype(n);
    if (!is_describable(t)) {
      throw std::invalid_argument("describe: '" + n + "' does not store values on its own");
    }
    out.push_back(t);
  }
  if (out.empty()) throw std::invalid_argument("describe: the list of formats is empty");
  return out;
}

py::object describe(const py::handle& value, const py::object& fmts, const std::string& rounding,
                    bool saturate, uint64_t seed) {
  const double x = value_of(value);
  const Round round = parse_rounding(rounding);
  const Overflow overflow = saturate ? Overflow::saturate : Overflow::ieee;
  py::list out;
  // The CLI's first VALUE draws sr_bits(seed, 0) (cmd_formats.cpp), so one value here matches it.
  for (DType t : describe_formats(fmts))
    out.append(stored_dict(describe_value(t, x, round, overflow, sr_bits(seed, 0))));
  if (py::isinstance<py::str>(fmts)) return out[0];
  return out;
}

template <class T>
py::object opt(const std::optional<T>& v) {
  return v ? py::cast(*v) : py::none();
}

// `mixp formats --table --json`'s "formats" list, same keys and order of formats.
py::list formats_table() {
  std::vector<DType> formats;
  const auto d = describe_default_formats();
  formats.assign(d.begin(), d.end());
  formats.push_back(DType::e8m0);
  py::list out;
  for (DType t : formats) {
    const FormatFacts f = format_facts(t);
    const auto hex = [&](const std::optional<uint64_t>& b) {
      return b ? py::cast(bits_hex(t, *b)) : py::none();
    };
    py::dict e;
    e["format"] = std::string(name(t));
    e["kind"] = std::string(f.kind);
    e["bits"] = f.bits;
    e["exponent_bits"] = opt(f.exponent_bits);
    e["mantissa_bits"] = opt(f.mantissa_bits);
    e["bias"] = opt(f.bias);
    e["max_finite"] = f.max_finite;
    e["min_normal"] = opt(f.min_normal);
    e["min_subnormal"] = f.min_positive;
    e["epsilon"] = opt(f.epsilon);
    e["decimal_digits"] = f.decimal_digits;
    e["has_inf"] = f.inf_bits.has_value();
    e["inf"] = hex(f.inf_bits);
    e["has_nan"] = f.nan_bits.has_value();
    e["nan"] = hex(f.nan_bits);
    e["nan_encodings"] = std::string(f.nan_rule);
    e["block_size"] = f.block_size;
    e["scale_type"] = f.scale_dtype ? py::cast(std::string(name(*f.scale_dtype))) : py::none();
    e["safetensors"] = f.safetensors.empty() ? py::none() : py::cast(std::string(f.safetensors));
    out.append(e);
  }
  return out;
}

// mixp's exceptions -> Python's (docs/python.md "Errors"): the caller's mistakes
// (std::invalid_argument and its ConfigError/PolicyError, std::out_of_range, std::domain_error)
// are ValueError; a missing file is FileNotFoundError; other failures while working
// (std::runtime_error: IoError, DataError, TrainError, ...) RuntimeError; std::bad_alloc
// MemoryError. pybind11's own exceptions pass through unchanged.
void translate_error(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const py::builtin_exception&) {
    throw;
  } catch (const py::error_already_set&) {
    throw;
  } catch (const std::filesystem::filesystem_error& e) {
    PyErr_SetString(e.code() == std::errc::no_such_file_or_directory ? PyExc_FileNotFoundError
                                                                      : PyExc_OSError,
                    e.what());
  } catch (const std::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::out_of_range& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::domain_error& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::length_error& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_SetString(PyExc_MemoryError, "out of memory");
  } catch (const SafeTensorsError& e) {
    // A malformed file is bad input, as json.loads or np.load raise ValueError for theirs.
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::runtime_error& e) {
    // mixp's file errors carry strerror's text (io/atomic_file.h IoError, data/error.h) or say
    // "... does not exist" (a missing data folder, src/data/).
    const bool missing = std::strstr(e.what(), std::strerror(ENOENT)) != nullptr ||
                         std::strstr(e.what(), "does not exist") != nullptr;
    PyErr_SetString(missing ? PyExc_FileNotFoundError : PyExc_RuntimeError, e.what());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

}  // namespace

void bind_formats(py::module_& m) {
  m.def("round", &round_array, py::arg("x"), py::arg("fmt"), py::arg("rounding"),
        py::arg("saturate"), py::arg("seed"));
  m.def("encode", &encode_array, py::arg("x"), py::arg("fmt"), py::arg("rounding"),
        py::arg("saturate"), py::arg("seed"));
  m.def("decode", &decode_array, py::arg("codes"), py::arg("fmt"));
  m.def("quantize", &quantize_array, py::arg("x"), py::arg("scheme"), py::arg("block_size"),
        py::arg("rounding"), py::arg("seed"));
  m.def("dequantize", &dequantize_array, py::arg("scheme"), py::arg("shape"),
        py::arg("block_size"), py::arg("element"), py::arg("data"), py::arg("scale_dtype"),
        py::arg("scales"), py::arg("zero_points"));
  m.def("describe", &describe, py::arg("value"), py::arg("fmt"), py::arg("rounding"),
        py::arg("saturate"), py::arg("seed"));
  m.def("formats", &formats_table);
  m.def("format_names", [] {
    std::vector<std::string> v;
    for (const auto& t : all_dtypes()) v.emplace_back(t.name);
    return v;
  });
  m.def("block_schemes", &block_scheme_names);
  py::register_exception_translator(&translate_error);
}

}  // namespace mixp::python

PYBIND11_MODULE(_mixp, m) {
  m.doc() = "mixp's C++ core (docs/python.md); use the `mixp` package, not this module";
  mixp::python::bind_formats(m);
  mixp::python::bind_engine(m);
  mixp::python::bind_io(m);
}
