#include "backend/cpu/onednn_util.h"

#include <omp.h>

#include "mixp/format/cpu_features.h"
#include "mixp/tensor/factories.h"

namespace mixp::onednn {

dnnl::engine& engine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::memory::data_type data_type(DType dt) {
  using dt_t = dnnl::memory::data_type;
  switch (dt) {
    case DType::fp32:
      return dt_t::f32;
    case DType::bf16:
      return dt_t::bf16;
    case DType::fp16:
      return dt_t::f16;
    case DType::int8:
      return dt_t::s8;
    case DType::uint8:
      return dt_t::u8;
    case DType::int32:
      return dt_t::s32;
    default:
      throw std::invalid_argument("oneDNN has no data type for " + std::string(mixp::name(dt)));
  }
}

bool supports(DType dt) {
  switch (dt) {
    case DType::fp32:
      return true;
    case DType::bf16:
      return cpu_features().use_avx512();  // oneDNN's bf16 needs AVX-512 (emulated without BF16)
    default:
      return false;
  }
}

namespace {
std::mutex g_mu;
std::unordered_map<Key, CachedPrimitive, KeyHash>& table() {
  static auto* t = new std::unordered_map<Key, CachedPrimitive, KeyHash>();
  return *t;
}
}  // namespace

CachedPrimitive& cached(const Key& key0, const std::function<CachedPrimitive()>& make) {
  // oneDNN fixes some blocking decisions for the thread count at creation (as its own cache
  // does, we key on it): set_num_threads() then gets primitives made for the new count.
  Key key = key0;
  key.add(omp_get_max_threads());
  std::lock_guard lock(g_mu);
  auto it = table().find(key);
  if (it != table().end()) return it->second;
  return table().emplace(key, make()).first->second;
}

size_t cache_size() {
  std::lock_guard lock(g_mu);
  return table().size();
}

void execute(CachedPrimitive& p, std::unordered_map<int, dnnl::memory>& args) {
  Tensor scratch;
  if (p.scratchpad_bytes > 0) {
    scratch = empty(Shape{static_cast<int64_t>(p.scratchpad_bytes)}, {.dtype = DType::uint8});
    args.insert(
        {DNNL_ARG_SCRATCHPAD,
         dnnl::memory(dnnl::memory::desc({static_cast<int64_t>(p.scratchpad_bytes)},
                                         dnnl::memory::data_type::u8, dnnl::memory::format_tag::a),
                      engine(), scratch.data_ptr())});
  }
  p.prim.execute(stream(), args);
  stream().wait();
}

dnnl::primitive_attr base_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {
CachedPrimitive& reorder_for(const Key& base, int arg, bool to_blocked,
                             const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  Key k = base;
  k.add(1000 + arg);
  k.add(to_blocked);
  return cached(k, [&] {
    dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, base_attr());
    return CachedPrimitive{dnnl::reorder(pd), pd.scratchpad_desc().get_size(), {}};
  });
}
}  // namespace

dnnl::memory LayoutArgs::staged(int arg, const dnnl::memory::desc& plain, const Tensor& t,
                                bool is_input) {
  const auto it = prim_.arg_descs.find(arg);
  dnnl::memory user(plain, engine(), t.data_ptr());
  if (it == prim_.arg_descs.end() || it->second == plain) return user;
  const dnnl::memory::desc& want = it->second;
  Tensor buf = Tensor::empty(Shape{static_cast<int64_t>(want.get_size())}, {.dtype = DType::uint8});
  temps_.push_back(buf);
  dnnl::memory tmp(want, engine(), buf.data_ptr());
  if (is_input) {
    CachedPrimitive& r = reorder_for(key_, arg, true, plain, want);
    std::unordered_map<int, dnnl::memory> a{{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, tmp}};
    onednn::execute(r, a);
  } else {
    back_.push_back({arg, tmp, user});
  }
  return tmp;
}

void LayoutArgs::input(int arg, const dnnl::memory::desc& plain, const Tensor& t) {
  args_.insert({arg, staged(arg, plain, t, true)});
}
void LayoutArgs::output(int arg, const dnnl::memory::desc& plain, const Tensor& t) {
  args_.insert({arg, staged(arg, plain, t, false)});
}

void LayoutArgs::execute() {
  onednn::execute(prim_, args_);
  for (Back& b : back_) {
    CachedPrimitive& r = reorder_for(key_, b.arg, false, b.from.get_desc(), b.to.get_desc());
    std::unordered_map<int, dnnl::memory> a{{DNNL_ARG_FROM, b.from}, {DNNL_ARG_TO, b.to}};
    onednn::execute(r, a);
  }
}

}  // namespace mixp::onednn
