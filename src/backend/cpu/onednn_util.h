// oneDNN plumbing for the cpu backend (internal): the engine, a per-thread stream, dtype mapping,
// user-managed scratchpads from the caching allocator, and a small primitive cache.
//
// Why a cache of our own: oneDNN caches primitives, but building the primitive *descriptor*
// (implementation search) still costs tens of microseconds per call — as much as a small GEMM.
// We key on everything that defines the primitive (shapes, strides, dtypes, post-ops) and keep
// the primitive and its scratchpad size.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "mixp/tensor/tensor.h"

namespace mixp::onednn {

dnnl::engine& engine();
dnnl::stream& stream();  // one per thread

// The oneDNN data type of a storage dtype; throws for dtypes oneDNN cannot take directly.
dnnl::memory::data_type data_type(DType dt);
// Whether oneDNN can run a primitive of this dtype on this machine (used to pick fallbacks).
bool supports(DType dt);

inline dnnl::memory::dims dims_of(const Tensor& t) {
  return dnnl::memory::dims(t.shape().begin(), t.shape().end());
}
inline dnnl::memory::dims strides_of(const Tensor& t) {
  return dnnl::memory::dims(t.strides().begin(), t.strides().end());
}
inline dnnl::memory memory(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, engine(), t.data_ptr());
}

// A key of up to 32 int64 values, compared and hashed as bytes.
struct Key {
  int64_t v[32] = {};
  int n = 0;
  void add(int64_t x) {
    if (n == 32) throw std::logic_error("onednn::Key: too many fields");
    v[n++] = x;
  }
  friend bool operator==(const Key& a, const Key& b) {
    return a.n == b.n && std::memcmp(a.v, b.v, sizeof(int64_t) * a.n) == 0;
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < k.n; ++i) h = (h ^ static_cast<uint64_t>(k.v[i])) * 1099511628211ULL;
    return static_cast<size_t>(h);
  }
};

struct CachedPrimitive {
  dnnl::primitive prim;
  size_t scratchpad_bytes = 0;
  // The layouts the primitive chose for its arguments (format_tag::any), keyed by DNNL_ARG_*.
  std::unordered_map<int, dnnl::memory::desc> arg_descs;
};

// Returns the cached primitive for `key`, building it with `make` on a miss (thread-safe).
CachedPrimitive& cached(const Key& key, const std::function<CachedPrimitive()>& make);
size_t cache_size();

// Executes a primitive with a user scratchpad taken from the caching allocator.
void execute(CachedPrimitive& p, std::unordered_map<int, dnnl::memory>& args);

// The attributes every primitive uses: user scratchpad.
dnnl::primitive_attr base_attr();

// Arguments in plain layout whose primitive wants another (blocked) layout: inputs are reordered
// into temporary buffers from the caching allocator before execution, outputs are written to a
// temporary and reordered back after it. Reorder primitives are cached by `key` and argument.
class LayoutArgs {
 public:
  LayoutArgs(const Key& key, CachedPrimitive& prim) : key_(key), prim_(prim) {}
  void input(int arg, const dnnl::memory::desc& plain, const Tensor& t);
  void output(int arg, const dnnl::memory::desc& plain, const Tensor& t);
  // Runs the primitive and the reorders back into the outputs.
  void execute();

 private:
  dnnl::memory staged(int arg, const dnnl::memory::desc& plain, const Tensor& t, bool is_input);
  Key key_;
  CachedPrimitive& prim_;
  std::unordered_map<int, dnnl::memory> args_;
  std::vector<Tensor> temps_;
  struct Back {
    int arg;
    dnnl::memory from, to;
  };
  std::vector<Back> back_;
};

}  // namespace mixp::onednn
