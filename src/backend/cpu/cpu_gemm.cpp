// mixp::gemm (see mixp/backend/gemm.h): float pairs go through CpuBackend::matmul so that they
// share its primitive cache and every improvement made there; the int8 pairs, which
// Backend::matmul does not take yet (its dst is fp32), run a cached oneDNN s32 primitive here.
// When CpuBackend::matmul grows an int32 dst, the int8 branch should move there.
#include <optional>
#include <stdexcept>

#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/onednn_util.h"
#include "backend/narrow.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/gemm.h"
#include "mixp/tensor/factories.h"

namespace mixp {
namespace {
using dnnl::memory;

constexpr int64_t kIntGemmKey =
    40;  // primitive kind in the onednn::Key space (1 matmul, 10-12 conv)

// Whether oneDNN runs bf16 here: it needs AVX-512 in the hardware (onednn::supports) and in its
// effective ISA, which ONEDNN_MAX_CPU_ISA can cap below what the hardware has.
bool onednn_bf16() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto need = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return onednn::supports(DType::bf16) && (isa & need) == need;
}

bool is_int8_pair(DType a, DType b) {
  return (a == DType::uint8 || a == DType::int8) && b == DType::int8;
}

using kern::is_fp8;

[[noreturn]] void unsupported(DType a, DType b) {
  throw std::invalid_argument(
      "mixp::gemm: no GEMM for " + std::string(name(a)) + " x " + std::string(name(b)) +
      "; supported pairs: fp32 x fp32 -> fp32, bf16 x bf16 -> fp32, fp8 x fp8 -> fp32 (E4M3 x "
      "E4M3, E4M3 x E5M2, E5M2 x E4M3), uint8 x int8 -> int32, int8 x int8 -> int32 (convert the "
      "inputs first)");
}

// Row- or column-major views pass as strided descriptors; anything else is copied.
Tensor operand(const Tensor& t) {
  const int64_t r = t.shape()[0], c = t.shape()[1], sr = t.strides()[0], sc = t.strides()[1];
  const bool row_major = (sc == 1 || c == 1) && (sr >= c || r == 1);
  const bool col_major = (sr == 1 || r == 1) && (sc >= r || c == 1);
  return row_major || col_major ? t : t.detach().contiguous();
}

memory::desc operand_md(const Tensor& t) {
  const int64_t r = t.shape()[0], c = t.shape()[1];
  int64_t sr = t.strides()[0], sc = t.strides()[1];
  if (c == 1) sc = 1;
  if (r == 1) sr = sc == 1 ? c : 1;
  return memory::desc({r, c}, onednn::data_type(t.dtype()), {sr, sc});
}

dnnl::matmul::primitive_desc matmul_pd(const memory::desc& a, const memory::desc& b,
                                       const memory::desc& d) {
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, d), onednn::base_attr(),
                                      onednn::engine());
}

void check_shapes(const Tensor& dst, const Tensor& a, const Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2 || a.shape()[1] != b.shape()[0]) {
    throw std::invalid_argument("mixp::gemm: expected a [M, K] and b [K, N], got a " +
                                a.shape().str() + " and b " + b.shape().str());
  }
  if (dst.dim() != 2 || dst.shape()[0] != a.shape()[0] || dst.shape()[1] != b.shape()[1] ||
      !dst.is_contiguous()) {
    throw std::invalid_argument("mixp::gemm: dst must be contiguous [" +
                                std::to_string(a.shape()[0]) + ", " + std::to_string(b.shape()[1]) +
                                "], got " + dst.shape().str());
  }
  const DType want = gemm_result_dtype(a.dtype(), b.dtype());
  if (dst.dtype() != want) {
    throw std::invalid_argument("mixp::gemm: dst must be " + std::string(name(want)) + " for " +
                                std::string(name(a.dtype())) + " x " +
                                std::string(name(b.dtype())) + ", got " +
                                std::string(name(dst.dtype())));
  }
}

std::string impl_name(const dnnl::primitive_desc_base& pd) {
  return pd.impl_info_str();
}

}  // namespace

DType gemm_result_dtype(DType a, DType b) {
  if (a == DType::fp32 && b == DType::fp32) return DType::fp32;
  if (a == DType::bf16 && b == DType::bf16) return DType::fp32;
  if (kern::is_fp8_gemm_pair(a, b)) return DType::fp32;
  if (is_int8_pair(a, b)) return DType::int32;
  unsupported(a, b);
}

void gemm(Tensor& dst, const Tensor& a_in, const Tensor& b_in) {
  check_shapes(dst, a_in, b_in);
  // oneDNN rejects (or crashes on) zero-sized GEMMs, and the ref matmul that CpuBackend falls
  // back to has no bf16 compute: nothing to write, or an empty sum.
  if (dst.numel() == 0) return;
  if (a_in.shape()[1] == 0) {
    dst.zero_();
    return;
  }
  const DType at = a_in.dtype();
  if (at == DType::fp32 || at == DType::bf16 || is_fp8(at)) {
    // The cpu backend on the host; another device's backend (the guarded test device's forwards
    // to the cpu one inside its access scope) on its own tensors.
    Backend& be =
        dst.device().is_cpu() ? get_backend(BackendKind::cpu) : backend_for(dst, a_in, b_in);
    MatmulConfig cfg;
    cfg.compute = at;
    if (is_fp8(at)) {
      // FP8 codes: the backend's FP8 GEMM where it has one (cuda on sm_89+); elsewhere widened
      // to bf16, which holds every fp8 value exactly, and multiplied on the bf16 path below.
      if (be.fp8_matmul()) {
        be.matmul(dst, a_in, b_in, Tensor(), cfg);
        return;
      }
      gemm(dst, a_in.to(DType::bf16), b_in.to(DType::bf16));
      return;
    }
    if (at == DType::bf16 && !onednn_bf16()) {
      // No oneDNN bf16 kernel below AVX-512: widening is exact, and the fp32 GEMM accumulates in
      // fp32 just as the bf16 one does.
      cfg.compute = DType::fp32;
      be.matmul(dst, a_in.to(DType::fp32), b_in.to(DType::fp32), Tensor(), cfg);
      return;
    }
    be.matmul(dst, a_in, b_in, Tensor(), cfg);
    return;
  }
  const Tensor a = operand(a_in), b = operand(b_in);
  const memory::desc a_md = operand_md(a), b_md = operand_md(b);
  const memory::desc d_md({dst.shape()[0], dst.shape()[1]}, memory::data_type::s32,
                          {dst.shape()[1], 1});
  onednn::Key key;
  key.add(kIntGemmKey);
  key.add(static_cast<int64_t>(at));
  for (const Tensor* t : {&a, &b}) {
    for (int i = 0; i < 2; ++i) key.add(t->shape()[i]);
    for (int i = 0; i < 2; ++i) key.add(t->strides()[i]);
  }
  onednn::CachedPrimitive& p = onednn::cached(key, [&] {
    const dnnl::matmul::primitive_desc pd = matmul_pd(a_md, b_md, d_md);
    return onednn::CachedPrimitive{dnnl::matmul(pd), pd.scratchpad_desc().get_size(), {}};
  });
  std::unordered_map<int, memory> args;
  args.insert({DNNL_ARG_SRC, onednn::memory(a_md, a)});
  args.insert({DNNL_ARG_WEIGHTS, onednn::memory(b_md, b)});
  args.insert({DNNL_ARG_DST, onednn::memory(d_md, dst)});
  onednn::execute(p, args);
}

namespace {

// The one decision of gemm_chunk_scaled and gemm_chunk_scaled_runs: the kernel's description of
// (dst, a, b) when it runs, nullopt where it declines.
std::optional<cpu::Bf16Gemm> chunk_scaled_gemm(Tensor& dst, const Tensor& a, const Tensor& b) {
  check_shapes(dst, a, b);
  const int64_t K = a.shape()[1];
  if (a.dtype() != DType::bf16 || b.dtype() != DType::bf16 || dst.dtype() != DType::fp32 ||
      !dst.device().is_cpu() || !a.device().is_cpu() || !b.device().is_cpu() ||
      !dst.is_contiguous() || K == 0 || K % 128 != 0 || !onednn_bf16())
    return std::nullopt;
  // Taken exactly where gemm() would run every 128-deep chunk on mixp's kernel (the chunk's
  // GEMM differs from the whole one only in k), so the numbers are those of the chunk loop.
  cpu::Bf16Gemm g = cpu::describe_bf16_gemm(dst, a, b, Tensor(), false);
  g.k = 128;
  if (!cpu::own_bf16_gemm(g)) return std::nullopt;
  g.k = K;
  return g;
}

}  // namespace

bool gemm_chunk_scaled_runs(Tensor& dst, const Tensor& a, const Tensor& b) {
  return chunk_scaled_gemm(dst, a, b).has_value();
}

bool gemm_chunk_scaled(Tensor& dst, const Tensor& a, const Tensor& b, const float* row_scale,
                       const float* col_scale) {
  std::optional<cpu::Bf16Gemm> g = chunk_scaled_gemm(dst, a, b);
  if (!g) return false;
  g->row_scale = row_scale;
  g->col_scale = col_scale;
  cpu::gemm_bf16_chunk_scaled(*g);
  dst.bump_version();
  return true;
}

bool gemm_chunk_scaled_runs(int64_t m, int64_t n, int64_t k) {
  if (k <= 0 || k % 128 != 0 || !onednn_bf16()) return false;
  cpu::Bf16Gemm g;  // one chunk's GEMM, a and b row-major
  g.m = m;
  g.n = n;
  g.k = 128;
  g.a_rs = k;
  g.a_cs = 1;
  g.b_rs = n;
  g.b_cs = 1;
  return cpu::own_bf16_gemm(g);
}

Tensor gemm(const Tensor& a, const Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2) {
    throw std::invalid_argument("mixp::gemm: expected a [M, K] and b [K, N], got a " +
                                a.shape().str() + " and b " + b.shape().str());
  }
  Tensor dst =
      empty(Shape{a.shape()[0], b.shape()[1]},
            {.dtype = gemm_result_dtype(a.dtype(), b.dtype()), .device = a.device()});
  gemm(dst, a, b);
  return dst;
}

std::string gemm_implementation(DType a, DType b, int64_t m, int64_t n, int64_t k) {
  const DType d = gemm_result_dtype(a, b);
  if (is_fp8(a))
    return "bf16 (fp8 widened) " + gemm_implementation(DType::bf16, DType::bf16, m, n, k);
  if (a == DType::bf16 && b == DType::bf16) {
    // Row-major operands, as mixp::gemm passes contiguous tensors (gemm_bf16.h decides).
    cpu::Bf16Gemm g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a_rs = k;
    g.a_cs = 1;
    g.b_rs = n;
    g.b_cs = 1;
    if (cpu::own_bf16_gemm(g))
      return "mixp:avx512_bf16 (8x48 VDPBF16PS, src/backend/cpu/gemm_bf16.h)";
  }
  std::string prefix;
  if (a == DType::bf16 && !onednn_bf16()) {
    prefix = "fp32 (bf16 widened) ";
    a = b = DType::fp32;
  }
  const memory::desc a_md({m, k}, onednn::data_type(a), memory::format_tag::ab);
  const memory::desc b_md({k, n}, onednn::data_type(b), memory::format_tag::ab);
  const memory::desc d_md({m, n}, onednn::data_type(d), memory::format_tag::ab);
  return prefix + impl_name(matmul_pd(a_md, b_md, d_md));
}

}  // namespace mixp
