// The validation windows of a token stream, shared by the byte-level corpus (text_corpus.cpp,
// int32 tokens) and llm.c's token files (token_file.cpp, uint16 tokens): window w is tokens
// [w * context, (w + 1) * context] of the validation part, its inputs the first `context` and its
// targets the last `context` of them; batch `index` holds windows [index * batch, ...), the last
// batch fewer.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>

namespace mixp::data::detail {

// Copies (widening) batch `index` of the `windows` windows of `val` into inputs and targets
// (batch x context each); returns its number of rows.
template <class T>
int64_t copy_val_windows(const T* val, int64_t windows, int64_t index, int64_t batch,
                         int64_t context, std::span<int32_t> inputs, std::span<int32_t> targets) {
  const int64_t nb = (windows + batch - 1) / batch;
  if (index < 0 || index >= nb) {
    throw std::out_of_range(fmt::format("val_batch: index {} outside [0, {})", index, nb));
  }
  const int64_t first = index * batch;
  const int64_t rows = std::min(batch, windows - first);
  const size_t ctx = size_t(context);
  for (int64_t r = 0; r < rows; ++r) {
    const T* w = val + size_t(first + r) * ctx;
    std::copy_n(w, ctx, inputs.data() + size_t(r) * ctx);
    std::copy_n(w + 1, ctx, targets.data() + size_t(r) * ctx);
  }
  return rows;
}

}  // namespace mixp::data::detail
