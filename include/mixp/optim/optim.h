// Umbrella header of the optim module: includes only.
#pragma once
#include "mixp/optim/adam.h"
#include "mixp/optim/clip_grad.h"
#include "mixp/optim/lr_schedule.h"
#include "mixp/optim/optimizer.h"
#include "mixp/optim/sgd.h"
#include "mixp/optim/step_reductions.h"
#include "mixp/optim/weight_shadow_hook.h"
