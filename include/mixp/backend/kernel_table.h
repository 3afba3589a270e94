// Helpers that expand the rows of the kernel table (mixp/backend/kernels.def) into declarations
// and forwarders. Each user defines MIXP_KERNEL with one of these and includes the table:
//
//   #define MIXP_KERNEL(name, kind, ref, cpu, cuda, params, args, observe)
//     MIXP_KT_IF(cpu, void name params override;)        (one line, or continued with a backslash)
//   #include "mixp/backend/kernels.def"
//
// The flags are the literal tokens 0 and 1 and `kind` is PURE or DEFAULT, pasted onto these names.
#pragma once

#define MIXP_KT_CAT_(a, b) a##b
#define MIXP_KT_CAT(a, b) MIXP_KT_CAT_(a, b)
// The tokens after `flag` when it is 1, nothing when it is 0.
#define MIXP_KT_IF(flag, ...) MIXP_KT_CAT(MIXP_KT_IF_, flag)(__VA_ARGS__)
#define MIXP_KT_IF_1(...) __VA_ARGS__
#define MIXP_KT_IF_0(...)
// What follows a kernel's declaration in Backend: = 0 for PURE, nothing for DEFAULT.
#define MIXP_KT_PURE_SPEC(kind) MIXP_KT_CAT(MIXP_KT_PURE_SPEC_, kind)
#define MIXP_KT_PURE_SPEC_PURE = 0
#define MIXP_KT_PURE_SPEC_DEFAULT
// Whether a kernel a backend does not override needs a stub there (PURE: 1, DEFAULT: 0).
#define MIXP_KT_IS_PURE(kind) MIXP_KT_CAT(MIXP_KT_IS_PURE_, kind)
#define MIXP_KT_IS_PURE_PURE 1
#define MIXP_KT_IS_PURE_DEFAULT 0
#define MIXP_KT_NOT(flag) MIXP_KT_CAT(MIXP_KT_NOT_, flag)
#define MIXP_KT_NOT_0 1
#define MIXP_KT_NOT_1 0
#define MIXP_KT_AND(a, b) MIXP_KT_CAT(MIXP_KT_AND_, MIXP_KT_CAT(a, b))
#define MIXP_KT_AND_00 0
#define MIXP_KT_AND_01 0
#define MIXP_KT_AND_10 0
#define MIXP_KT_AND_11 1
// (a, b, c) -> a, b, c: the parenthesized lists of the table as argument or initializer lists.
#define MIXP_KT_UNPAREN(...) __VA_ARGS__
