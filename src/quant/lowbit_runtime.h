// The packed model's inference state (internal to lowbit_model.cpp and lowbit_fused.cpp): each
// layer step's weights in the kernels' layouts, and the fused sign epilogue of the layers that
// feed a binary-act layer (include/mixp/quant/lowbit_model.h).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "mixp/backend/lowbit_gemm.h"
#include "mixp/quant/lowbit_model.h"

namespace mixp::quant {

// What a layer step keeps ready for inference (built from its PackedStep).
struct PackedModel::Runtime {
  std::vector<int8_t> w8;      // [O, K] int8 codes (every layer; binary-act convs use them for
                               // the padding corrections)
  std::vector<uint64_t> bits;  // binary-act: [O, words] weight bit rows
  int64_t words = 0;
  std::vector<float> mult;  // input_scale * weight_scale[o]
  std::optional<LowBitB> lowb;  // int4/int2: the codes kept packed for lowbit_gemm_s32
  std::optional<XnorConvWeights> xconv;  // binary-act convs: for xnor_conv_sign_bits
  std::map<std::array<int64_t, 4>, std::vector<int32_t>> corr;  // conv border pattern -> [O]
  Tensor w8_oihw;                // int-path convs: the codes as an int8 [O, C, KS, KS] tensor
  std::vector<int32_t> wsum;     // their sums per output channel (the s8 input's offset)
  // The fused sign epilogue (lowbit_fused.cpp): when this layer feeds a binary-act layer through
  // [batch_norm] -> sign, its s32 sums go straight to sign bits, +1 iff (sum >= thr[o]) XOR
  // flip bit o; `next` is the first step after the sign.
  bool fuse_sign = false;
  size_t next = 0;
  std::vector<int32_t> thr;
  std::vector<int32_t> thr_shifted;  // int-path convs on oneDNN with s8 input: thr + 128 wsum[o]
  std::map<const int32_t*, std::vector<int32_t>> thr_corr;  // binary convs: thr + a `corr` entry
  std::vector<uint64_t> flip;
  // binary-act linears fed by a flattened [C, H, W] bit map: the weight bits in (h, w, c) order.
  std::map<std::array<int64_t, 3>, std::vector<uint64_t>> hwc_bits;
};

namespace fused {

// Sign codes as bits, NHWC: words [N, H, W, CW], CW = ceil(C / 64), bit c % 64 of word c / 64
// is 1 for -1 and 0 for +1 (the bits past C zero). A linear layer's output is H = W = 1;
// `flat` marks a map that went through a flatten (the next linear reads it (h, w, c)).
struct BitMap {
  Tensor words;  // int64
  int64_t N = 0, H = 0, W = 0, C = 0, CW = 0;
  bool flat = false;
  const uint64_t* data() const { return reinterpret_cast<const uint64_t*>(words.data_ptr()); }
};

// Called after step `last` (a binary-act layer taking sign codes) is added: if the steps before
// it are  layer [batch_norm] act(sign) {max_pool2d | flatten}, that layer's thresholds are
// computed (by evaluating the same fp32 ops as the unfused path) and its epilogue fused.
void plan_sign_epilogue(const std::vector<PackedStep>& steps,
                        std::vector<std::unique_ptr<PackedModel::Runtime>>& rt, size_t last);

// acc [N, OH, OW, O] (or [N, O]) s32 sums of a fused layer -> its sign bits; `shifted`: the
// sums of conv_onednn with s8 codes shifted by +128 (thr_shifted).
BitMap sign_bits(const Tensor& acc, int64_t N, int64_t OH, int64_t OW,
                 const PackedModel::Runtime& rt, bool shifted);
// thr + c (a padding correction of rt.corr), clamped to int32, cached in rt.thr_corr.
const int32_t* corrected_thresholds(PackedModel::Runtime& rt, const int32_t* c);
// Max pooling on sign bits: -1 (bit 1) only where every valid position of the window is -1.
BitMap max_pool(const BitMap& x, const PackedStep& s);
// A binary-act linear's input rows [N, words] from a bit map, and the weight bits in the same
// order ((h, w, c) for a flattened [C, H, W] map; K = C * H * W must equal in_features).
void linear_rows(const BitMap& x, uint64_t* rows, int64_t words);
const std::vector<uint64_t>& linear_weight_bits(const BitMap& x, const PackedStep& s,
                                                PackedModel::Runtime& rt);

}  // namespace fused
}  // namespace mixp::quant
