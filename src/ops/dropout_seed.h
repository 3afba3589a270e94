// Where dropout(x, p, training, Generator&) (mixp/ops/ops.h) gets its seed. The op draws from the
// generator unless a source is registered: autograd's checkpoint() registers its seed log while
// libmixp loads (src/autograd/checkpoint.cpp), so that a recomputed segment replays the masks of
// its forward. The seed is passed in from the layer above; ops include nothing of autograd but
// its graph core (docs/architecture.md 2.2).
#pragma once
#include <cstdint>

namespace mixp {
class Generator;
namespace detail {

using DropoutSeedSource = uint64_t (*)(Generator& gen);
// Registers the source of every later dropout seed (process-wide; once, at load).
void set_dropout_seed_source(DropoutSeedSource source);
// The registered source's seed, or gen.next_u64() when none is registered.
uint64_t dropout_seed(Generator& gen);

}  // namespace detail
}  // namespace mixp
