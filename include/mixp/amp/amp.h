// Umbrella for the automatic mixed precision module.
#pragma once
#include "mixp/amp/autocast.h"
#include "mixp/amp/cast_policy.h"
#include "mixp/amp/tf32.h"
