// Umbrella for the block and quantized formats: OCP MX (block_mx.h), int8 per tensor/channel
// (block_int8.h), blockwise int4/NF4 (block_int4.h) and the name-driven entry point
// (block_tensor.h) that `mixp convert` uses.
#pragma once
#include "mixp/format/block_int4.h"
#include "mixp/format/block_int8.h"
#include "mixp/format/block_mx.h"
#include "mixp/format/block_tensor.h"
