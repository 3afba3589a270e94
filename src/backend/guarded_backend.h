// Internal: the backend of the guarded test device (guarded_backend.cpp).
#pragma once
#include "mixp/backend/backend.h"

namespace mixp::detail {
Backend& guarded_backend();
}  // namespace mixp::detail
