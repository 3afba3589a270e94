#include "tensor_bytes.h"

#include <cstring>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/tensor/factories.h"

namespace mixp::train::detail {

SafeTensor to_safetensor(const std::string& name, const Tensor& t) {
  NoGradGuard ng;
  const Tensor c = t.detach().contiguous();
  SafeTensor s;
  s.name = name;
  s.dtype = c.dtype();
  s.shape = dims(c.shape());
  s.data.resize(c.nbytes());
  if (c.nbytes()) std::memcpy(s.data.data(), c.data_ptr(), c.nbytes());
  return s;
}

void copy_from_safetensor(Tensor& t, const SafeTensor& s) {
  NoGradGuard ng;
  Tensor dst = t.detach();
  if (s.dtype == dst.dtype() && dst.is_contiguous()) {
    if (s.data.size() != dst.nbytes()) {
      throw std::logic_error("copy_from_safetensor: size mismatch for " + s.name);
    }
    if (!s.data.empty()) std::memcpy(dst.data_ptr(), s.data.data(), s.data.size());
    dst.bump_version();  // a raw write (Storage::version): copies of the old values are stale
    return;
  }
  // from_blob only wraps the bytes for the duration of the converting copy.
  Tensor src = from_blob(const_cast<std::byte*>(s.data.data()),
                         Shape(s.shape.begin(), s.shape.end()), s.dtype);
  dst.copy_(src);
}

}  // namespace mixp::train::detail
