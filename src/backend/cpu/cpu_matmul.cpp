// CpuBackend::matmul on oneDNN's matmul primitive. Transposed operands are passed as strided
// memory descriptors (no copies); bias and relu/gelu are fused (bias argument, eltwise post-op);
// accumulate is a sum post-op. Primitives are cached per (shapes, strides, dtypes, epilogue).
//
// Compute dtypes: fp32; bf16 (native on AVX512_BF16: bf16 operands, fp32 accumulation, dst and
// bias fp32 or bf16); fp16 (no native fp16 GEMM on this CPU class: exact emulation on the fp32
// GEMM, see below). Anything else falls through to the ref loops.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/onednn_util.h"
#include "backend/narrow.h"
#include "mixp/tensor/factories.h"

namespace mixp {
namespace {
using dnnl::memory;

// oneDNN wants one of the two inner strides to be 1 and the other to cover its dim; anything
// else (e.g. a sliced view with step) is copied to contiguous first.
Tensor gemm_operand(const Tensor& t) {
  const int d = t.dim();
  const int64_t r = t.shape()[d - 2], c = t.shape()[d - 1];
  const int64_t sr = t.strides()[d - 2], sc = t.strides()[d - 1];
  const bool row_major = (sc == 1 || c == 1) && (sr >= c || r == 1);
  const bool col_major = (sr == 1 || r == 1) && (sc >= r || c == 1);
  if (row_major || col_major) return t;
  return t.detach().contiguous();
}

// dims/strides of a matmul operand as oneDNN sees it: rank 2, or rank 3 with the batch dim
// set to 1 when the tensor is shared by every batch (rank 2 or batch stride 0).
void operand_desc(const Tensor& t, int rank, memory::dims& dims, memory::dims& strides) {
  const int d = t.dim();
  const int64_t r = t.shape()[d - 2], c = t.shape()[d - 1];
  int64_t sr = t.strides()[d - 2], sc = t.strides()[d - 1];
  // oneDNN rejects size-1 dims with arbitrary strides less often when they look contiguous.
  if (c == 1) sc = 1;
  if (r == 1) sr = sc == 1 ? c : 1;
  if (rank == 2) {
    dims = {r, c};
    strides = {sr, sc};
  } else {
    const bool shared = d == 2 || t.strides()[0] == 0 || t.shape()[0] == 1;
    const int64_t b = shared ? 1 : t.shape()[0];
    const int64_t sb = shared ? r * c : t.strides()[0];
    dims = {b, r, c};
    strides = {sb, sr, sc};
  }
}
// Rank-2 bf16 GEMMs on CPUs with AVX512_BF16 and no AMX run mixp's kernel where
// cpu::own_bf16_gemm takes them (gemm_bf16.h: 1.07-1.18x oneDNN 2.6 on GPT-2's shapes);
// false: not taken.
bool own_bf16_gemm_run(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
                       bool accumulate) {
  const cpu::Bf16Gemm g = cpu::describe_bf16_gemm(dst, a, b, bias, accumulate);
  if (!cpu::own_bf16_gemm(g)) return false;
  cpu::gemm_bf16(g);
  return true;
}
}  // namespace

void CpuBackend::matmul(Tensor& dst, const Tensor& a_in, const Tensor& b_in, const Tensor& bias,
                        const MatmulConfig& cfg) {
  const DType in_dt = a_in.dtype();
  // fp16 on a CPU without native fp16 GEMMs (and bf16 without bf16 dot products): exact
  // emulation. fp16 values are exact in fp32 and so are their products (11 + 11 significant bits
  // < 24), so widening the operands and running the fp32 GEMM gives fp16 x fp16 products with
  // fp32 accumulation; dst is rounded once.
  if (cpu::emulated_16(cfg.compute) && in_dt == cfg.compute && b_in.dtype() == cfg.compute &&
      dst.numel() > 0) {
    const Tensor a32 = kern::widen(*this, a_in, DType::fp32),
                 b32 = kern::widen(*this, b_in, DType::fp32);
    const Tensor bias32 = kern::widen(*this, bias, DType::fp32);
    MatmulConfig c32 = cfg;
    c32.compute = DType::fp32;
    kern::with_dst_as(*this, dst, DType::fp32, cfg.accumulate,
                      [&](Tensor& d) { matmul(d, a32, b32, bias32, c32); });
    return;
  }
  // bf16 x bf16 -> fp32 accumulation (oneDNN, AVX512_BF16); dst and bias in fp32 or bf16.
  auto dst_ok = [&](DType d) {
    return d == DType::fp32 || (in_dt == DType::bf16 && d == DType::bf16);
  };
  const bool ok_dtypes = onednn::supports(in_dt) && b_in.dtype() == in_dt && cfg.compute == in_dt &&
                         dst_ok(dst.dtype()) && (!bias.defined() || dst_ok(bias.dtype()));
  // oneDNN rejects (or crashes on) zero-sized GEMMs; the ref loops handle them.
  if (!ok_dtypes || !dst.is_contiguous() || dst.numel() == 0 || a_in.numel() == 0 ||
      b_in.numel() == 0) {
    RefBackend::matmul(dst, a_in, b_in, bias, cfg);
    return;
  }
  const Tensor a = gemm_operand(a_in);
  const Tensor b = gemm_operand(b_in);
  const int rank = dst.dim();
  if (rank == 2 && in_dt == DType::bf16 && cfg.activation == Activation::none &&
      own_bf16_gemm_run(dst, a, b, bias, cfg.accumulate))
    return;
  memory::dims ad, as, bd, bs;
  operand_desc(a, rank, ad, as);
  operand_desc(b, rank, bd, bs);
  const memory::dims dd = onednn::dims_of(dst);

  onednn::Key key;
  key.add(1);  // primitive kind: matmul
  key.add(rank);
  for (auto v : ad) key.add(v);
  for (auto v : as) key.add(v);
  for (auto v : bd) key.add(v);
  for (auto v : bs) key.add(v);
  for (auto v : dd) key.add(v);
  key.add(static_cast<int64_t>(in_dt));
  key.add(static_cast<int64_t>(dst.dtype()));
  key.add(bias.defined() ? static_cast<int64_t>(bias.dtype()) : -1);
  key.add(bias.defined() ? bias.strides()[0] + 1 : 0);
  key.add(static_cast<int64_t>(cfg.activation));
  key.add(cfg.accumulate);

  memory::desc a_md(ad, onednn::data_type(in_dt), as);
  memory::desc b_md(bd, onednn::data_type(in_dt), bs);
  memory::desc d_md(dd, onednn::data_type(dst.dtype()), onednn::strides_of(dst));
  memory::desc bias_md;
  if (bias.defined()) {
    memory::dims bdims(rank, 1), bstr(rank, 0);
    bdims[rank - 1] = bias.shape()[0];
    for (int i = 0; i < rank; ++i) bstr[i] = bias.shape()[0];
    bstr[rank - 1] = bias.strides()[0] == 0 ? 1 : bias.strides()[0];
    bias_md = memory::desc(bdims, onednn::data_type(bias.dtype()), bstr);
  }

  onednn::CachedPrimitive& p = onednn::cached(key, [&] {
    dnnl::primitive_attr attr = onednn::base_attr();
    dnnl::post_ops po;
    if (cfg.accumulate) po.append_sum(1.0f);
    if (cfg.activation == Activation::relu)
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    if (cfg.activation == Activation::gelu)
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
    attr.set_post_ops(po);
    const dnnl::matmul::desc desc = bias.defined() ? dnnl::matmul::desc(a_md, b_md, bias_md, d_md)
                                                   : dnnl::matmul::desc(a_md, b_md, d_md);
    const dnnl::matmul::primitive_desc pd(desc, attr, onednn::engine());
    return onednn::CachedPrimitive{dnnl::matmul(pd), pd.scratchpad_desc().get_size(), {}};
  });

  std::unordered_map<int, memory> args;
  args.insert({DNNL_ARG_SRC, onednn::memory(a_md, a)});
  args.insert({DNNL_ARG_WEIGHTS, onednn::memory(b_md, b)});
  args.insert({DNNL_ARG_DST, onednn::memory(d_md, dst)});
  if (bias.defined()) args.insert({DNNL_ARG_BIAS, onednn::memory(bias_md, bias)});
  onednn::execute(p, args);
}

}  // namespace mixp
