// The parts of the `mixp._mixp` extension (docs/python.md), each bound by its own file.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "mixp/format/rounding.h"

namespace mixp::python {

using FloatArray = pybind11::array_t<float, pybind11::array::c_style | pybind11::array::forcecast>;

// "nearest" (PyTorch's and ml_dtypes' name for ties-to-even) or a parse_round spelling.
Round parse_rounding(const std::string& s);
std::vector<int64_t> shape_of(const pybind11::array& a);

void bind_formats(pybind11::module_& m);  // formats_module.cpp
void bind_engine(pybind11::module_& m);      // engine_module.cpp
void bind_io(pybind11::module_& m);          // io_module.cpp
}  // namespace mixp::python
