#include <mixp/mixp.h>  // the umbrella: the installed headers compile on their own, warning-free

#include <cstdio>

int main() {
  const auto b = mixp::bfloat16::from_double(3.14159265, mixp::Round::nearest_even, mixp::Overflow::ieee);
  std::printf("bf16(3.14159265) = %.9g bits 0x%04X\n", b.to_float(), static_cast<unsigned>(b.bits));
  return 0;
}
