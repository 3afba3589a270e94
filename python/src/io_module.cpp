// The file side of `mixp._mixp` (docs/python.md): .safetensors files through the library's own
// reader and writer (include/mixp/io/safetensors.h: the same validation `mixp convert` and the
// checkpoints get), and the inspector's statistics (include/mixp/inspect/tensor_stats.h) of
// arrays or of a file's tensors as the records `mixp train --inspect` writes
// (inspect::to_json_line). Tensors cross as raw little-endian storage: the Python layer
// (python/mixp/_io.py) turns bf16/fp8 codes into values with mixp.decode / mixp.encode.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "mixp/format/convert.h"
#include "mixp/format/dtype.h"
#include "mixp/inspect/tensor_inspector.h"
#include "mixp/inspect/tensor_stats.h"
#include "mixp/io/safetensors.h"

namespace py = pybind11;

namespace mixp::python {
namespace {

// The NumPy dtype a safetensors dtype's storage reads as: the type itself where NumPy has it,
// the unsigned codes for BF16 and F8_* (ml_dtypes' storage, docs/python.md).
py::dtype numpy_storage(DType t) {
  switch (t) {
    case DType::fp64: return py::dtype("float64");
    case DType::fp32: return py::dtype("float32");
    case DType::fp16: return py::dtype("float16");
    case DType::bf16: return py::dtype("uint16");
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
    case DType::uint8: return py::dtype("uint8");
    case DType::int8: return py::dtype("int8");
    case DType::int32: return py::dtype("int32");
    case DType::int64: return py::dtype("int64");
    case DType::boolean: return py::dtype("bool");
    default:
      throw std::invalid_argument(std::string("safetensors: no NumPy storage for ") +
                                  std::string(name(t)));
  }
}

using Loaded = std::tuple<std::string, std::string, py::array>;  // name, mixp dtype name, storage

// Every tensor of the file, in file order, with the file's metadata.
std::pair<std::vector<Loaded>, std::map<std::string, std::string>> load(const std::string& path) {
  SafeTensorsFile f;
  {
    py::gil_scoped_release nogil;
    f = read_safetensors(path);
  }
  std::vector<Loaded> out;
  out.reserve(f.tensors.size());
  for (SafeTensor& t : f.tensors) {
    py::array a(numpy_storage(t.dtype),
                std::vector<py::ssize_t>(t.shape.begin(), t.shape.end()));
    if (!t.data.empty()) std::memcpy(a.mutable_data(), t.data.data(), t.data.size());
    std::vector<std::byte>().swap(t.data);  // one copy alive at a time
    out.emplace_back(t.name, std::string(name(t.dtype)), std::move(a));
  }
  return {std::move(out), f.metadata};
}

// Writes tensors given as (name, mixp dtype name, storage array of that dtype's storage size)
// atomically (no file at `path` after a failure).
void save(const std::string& path, const std::vector<Loaded>& tensors,
          const std::map<std::string, std::string>& metadata) {
  SafeTensorsFile f;
  f.metadata = metadata;
  for (const auto& [n, dt, raw] : tensors) {
    SafeTensor t;
    t.name = n;
    t.dtype = parse_dtype(dt);
    if (traits(t.dtype).safetensors.empty()) {
      throw std::invalid_argument("save_safetensors: " + n + ": " + dt +
                                  " has no safetensors dtype (" + safetensors_dtype_names() + ")");
    }
    const py::array c = py::array::ensure(raw, py::array::c_style);
    if (c.itemsize() != traits(t.dtype).storage_bytes) {
      throw std::invalid_argument("save_safetensors: " + n + ": " + dt + " takes " +
                                  std::to_string(traits(t.dtype).storage_bytes) +
                                  "-byte elements, the array has " +
                                  std::to_string(c.itemsize()));
    }
    t.shape = shape_of(c);
    t.data.resize(static_cast<size_t>(c.nbytes()));
    if (!t.data.empty()) std::memcpy(t.data.data(), c.data(), t.data.size());
    f.tensors.push_back(std::move(t));
  }
  py::gil_scoped_release nogil;
  write_safetensors(path, f);
}

std::vector<inspect::StatFormat> stat_formats(const std::optional<std::vector<std::string>>& names) {
  if (!names) {
    const auto all = inspect::all_stat_formats();
    return {all.begin(), all.end()};
  }
  std::vector<inspect::StatFormat> out;
  for (const std::string& s : *names) {
    const auto f = inspect::parse_stat_format(s);
    if (!f) {
      throw std::invalid_argument("inspect: unknown format '" + s +
                                  "' (fp16 bf16 fp8_e4m3 fp8_e5m2 mxfp8 int8)");
    }
    out.push_back(*f);
  }
  return out;
}

// One record as `mixp train --inspect` writes it (to_json_line): step 0, role weight, the name
// split at its last dot into module and tensor (as the inspector splits parameter names).
std::string record(const std::string& full_name, DType dtype, const std::vector<int64_t>& shape,
                   std::span<const float> values, std::span<const inspect::StatFormat> formats) {
  inspect::StatRecord r;
  const size_t dot = full_name.rfind('.');
  r.module = dot == std::string::npos ? "" : full_name.substr(0, dot);
  r.tensor = dot == std::string::npos ? full_name : full_name.substr(dot + 1);
  r.role = inspect::Role::weight;
  r.dtype = dtype;
  r.shape = Shape(std::span<const int64_t>(shape));
  const int64_t row = shape.empty() ? 1 : shape.back();
  {
    py::gil_scoped_release nogil;
    r.stats = inspect::tensor_stats(values, row, formats);
  }
  return inspect::to_json_line(r);
}

// Records of named float32 arrays; `dtypes` names each one's dtype in the record (what the
// values were stored in: "fp32", or "fp16" for a float16 array widened by the caller).
std::vector<std::string> inspect_arrays(const std::vector<std::pair<std::string, FloatArray>>& xs,
                                        const std::vector<std::string>& dtypes,
                                        const std::optional<std::vector<std::string>>& fmts) {
  const auto formats = stat_formats(fmts);
  std::vector<std::string> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    const FloatArray& a = xs[i].second;
    out.push_back(record(xs[i].first, parse_dtype(dtypes.at(i)), shape_of(a),
                         std::span<const float>(a.data(), static_cast<size_t>(a.size())),
                         formats));
  }
  return out;
}

// Records of every floating tensor of a .safetensors file (integer and bool tensors have no
// statistics), values widened to fp32 as the inspector reads them (fp64 rounded to nearest).
std::vector<std::string> inspect_file(const std::string& path,
                                      const std::optional<std::vector<std::string>>& fmts) {
  const auto formats = stat_formats(fmts);
  SafeTensorsFile f;
  {
    py::gil_scoped_release nogil;
    f = read_safetensors(path);
  }
  std::vector<std::string> out;
  for (const SafeTensor& t : f.tensors) {
    if (!traits(t.dtype).is_float()) continue;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    if (t.dtype == DType::fp64) {
      const auto* d = reinterpret_cast<const double*>(t.data.data());
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(d[i]);
    } else {
      convert_to_f32(t.dtype, t.data.data(), v);
    }
    out.push_back(record(t.name, t.dtype, t.shape, v, formats));
  }
  return out;
}

}  // namespace

void bind_io(py::module_& m) {
  m.def("load_safetensors", &load, py::arg("path"));
  m.def("save_safetensors", &save, py::arg("path"), py::arg("tensors"), py::arg("metadata"));
  m.def("inspect_arrays", &inspect_arrays, py::arg("arrays"), py::arg("dtypes"),
        py::arg("formats"));
  m.def("inspect_file", &inspect_file, py::arg("path"), py::arg("formats"));
}

}  // namespace mixp::python
