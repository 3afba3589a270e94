#!/usr/bin/env python3
"""The dependency rule of docs/architecture.md 2.2, checked on every #include of the library.

    tests/lint/layering.py [REPO_ROOT]      (default: two folders up from this script)

A file of module M (include/mixp/M/..., src/M/...) may include
  - public headers (mixp/X/...) of M itself or of a module below M: the transitive closure of
    LAYERS[M] below;
  - internal headers (src/X/...) of M itself, or those listed in SHARED_INTERNAL (used across
    modules on purpose, each with its reason in docs/architecture.md 2.2).
Everything else is a back-import: a layer reaching up (e.g. nn including amp) or into another
module's internals. The known ones still to be removed are listed in KNOWN with the reason they
exist; a new one fails this check, and so does an entry of KNOWN that no longer happens (so the
list only shrinks). Prints "file:line: includes X (M may include: ...)" and exits 1 on any.
Run by CTest as part of the test "lint" (tests/lint/run_test.cmake).
"""
import os
import re
import sys

# What each module's files may include directly (public headers); closed transitively below.
LAYERS = {
    "util": [],
    "format": [],
    "data": [],
    "io": ["format"],
    "bench": ["amp", "ops", "autograd", "backend", "tensor", "format", "io"],
    "tensor": ["format"],
    "backend": ["tensor", "format"],
    "ops": ["backend", "tensor", "format"],
    "autograd": ["ops", "tensor"],
    "nn": ["ops", "autograd", "tensor", "io"],
    "optim": ["tensor", "format", "autograd", "backend"],
    "amp": ["nn", "ops", "optim", "autograd", "backend", "tensor", "format"],
    "quant": ["nn", "ops", "autograd", "io", "tensor", "format", "backend"],
    "dist": ["tensor", "format"],
    "inspect": ["amp", "nn", "optim", "ops", "autograd", "backend", "tensor", "format", "io"],
    "train": ["amp", "quant", "optim", "nn", "io", "data", "tensor", "format", "bench", "dist",
              "inspect"],
    "study": ["train", "nn", "format", "bench"],
}

# Internal headers shared across modules on purpose (docs/architecture.md 2.2), and who may use
# them ("*" = any module).
# The graph core of autograd (nodes, the engine, grad mode) lies beneath the ops that record into
# it and the Tensor whose backward() runs it; the rest of autograd (checkpoint, gradcheck) is
# built on ops. Public headers usable below their module's layer, and by whom.
# Tensor itself includes neither: Tensor::backward() runs the engine through a hook the engine
# registers (src/tensor/backward_hook.h).
# The graph core's own headers sit right above tensor: they include only tensor, format and each
# other (the op ids a node names are op_list.h, here, not ops').
GRAPH_CORE = {
    "mixp/autograd/node.h": {"ops"},
    "mixp/autograd/grad_mode.h": {"ops"},
    "mixp/autograd/op_list.h": {"ops"},
}
GRAPH_CORE_BELOW = {"tensor", "format"}

SHARED_INTERNAL = {
    "util/text.h": "*",
    "util/key_value.h": "*",
    "util/enum_names.h": "*",
    "ops/dispatch.h": {"autograd", "amp", "quant", "inspect"},
    # dropout's seed comes from above: checkpoint() registers its seed log there
    "ops/dropout_seed.h": {"autograd"},
    # Tensor::backward() runs the engine through the hook the engine registers
    "tensor/backward_hook.h": {"autograd"},
    # the Tensor methods that compute run the ops' code through the table the ops register
    "tensor/method_hooks.h": {"ops"},
    # a weight's shadow dies with it: amp registers the callback ~TensorImpl calls
    "tensor/release_hook.h": {"amp"},
    # the block formats' scalar math, one copy for the CPU quantizers and the CUDA kernels
    "format/block_quant_math.h": {"backend"},
    # the CUDA block GEMM validates its operands with the CPU path's own check
    "format/block_scaled_kernels.h": {"backend"},
    "backend/narrow.h": {"ops"},
    "backend/kernel_util.h": {"ops"},
}

# A backend implementation's internals (src/backend/cpu/, cuda/, ref/) belong to the backend
# module alone: other modules call the Backend interface or a narrow public header of
# include/mixp/backend/ (host_parallel.h, quant_kernels.h, int8_primitive.h, lowbit_gemm.h)
# that an implementation defines. No SHARED_INTERNAL entry may open them.
BACKEND_IMPL = ("backend/cpu/", "backend/cuda/", "backend/ref/")

# Back-imports that exist today, each to be removed (issue 12, "Layering holds"). file -> the
# included header. Remove an entry together with the include.
KNOWN = {}

# Concepts a module's code must not name (comments aside), with who owns them instead. amp owns
# precision: the weight shadows live in amp's cache (amp/weight_shadow.h), not on Tensor, and
# the optimizer reaches them only through its hook (optim/weight_shadow_hook.h).
FORBIDDEN_NAMES = {
    "tensor": (re.compile(r"shadow", re.I), "weight shadows belong to amp (amp/weight_shadow.h)"),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# A class of module M (declared in include/mixp/M/) has its members defined in M's own files: a
# definition "... Tensor::view(" elsewhere is the tensor module implemented from above (issue 30:
# the Tensor methods that compute are defined in src/tensor/ and run the ops through
# tensor/method_hooks.h). Definitions start a line; calls and declarations do not match.
CLASS_DECL = re.compile(r"^(?:class|struct)\s+(\w+)\b[^;]*$")
MEMBER_DEF = re.compile(r"^(?!\s)(?:[\w:<>,]+[\s&*]+)*[&*]?(\w+)::~?\w+\s*\([^=;]*$")


def class_owners(root):
    """Class name -> the module whose public headers declare it (names declared by two: none)."""
    owners = {}
    for dirpath, _, files in os.walk(os.path.join(root, "include/mixp")):
        for fn in files:
            if not fn.endswith(".h"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, fn), root)
            m = module_of(rel)
            if m is None:
                continue
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                for line in f:
                    g = CLASS_DECL.match(line)
                    if g:
                        owners[g.group(1)] = m if owners.get(g.group(1), m) == m else None
    return {k: v for k, v in owners.items() if v is not None}


def closure(module):
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        for d in LAYERS.get(m, []):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    seen.add(module)
    return seen


def module_of(rel):
    parts = rel.split("/")
    if parts[0] == "include" and len(parts) > 2 and parts[1] == "mixp":
        return parts[2] if len(parts) > 3 else None  # mixp/mixp.h: the umbrella
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    root = os.path.abspath(root)
    errors, seen_known = [], set()
    owners = class_owners(root)
    for inc, who in SHARED_INTERNAL.items():
        if inc.startswith(BACKEND_IMPL):
            errors.append(f"tests/lint/layering.py: SHARED_INTERNAL opens {inc} to {who}; a "
                          "backend implementation's internals stay in backend")
    for top in ("include/mixp", "src"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for fn in sorted(files):
                if not fn.endswith((".h", ".cpp", ".inc")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, fn), root)
                m = module_of(rel)
                if m is None:
                    continue
                if m not in LAYERS:
                    errors.append(f"{rel}: module '{m}' is not in tests/lint/layering.py's LAYERS; "
                                  "add it with what it may include (docs/architecture.md 2.2)")
                    continue
                allowed = closure(m)
                core = rel.startswith("include/") and rel[len("include/"):] in GRAPH_CORE
                if core:
                    allowed = set(GRAPH_CORE_BELOW)
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        if m in FORBIDDEN_NAMES:
                            pattern, owner = FORBIDDEN_NAMES[m]
                            if pattern.search(line.split("//")[0]):
                                errors.append(f"{rel}:{n}: names '{pattern.pattern}': {owner}")
                        d = MEMBER_DEF.match(line)
                        if d and owners.get(d.group(1), m) != m:
                            errors.append(f"{rel}:{n}: defines a member of {d.group(1)}, a class "
                                          f"of {owners[d.group(1)]}; define it in "
                                          f"{owners[d.group(1)]}'s own files (a hook where it "
                                          "needs a layer above, docs/architecture.md 2.2)")
                        g = INCLUDE.match(line)
                        if not g:
                            continue
                        inc = g.group(1)
                        if inc.startswith("mixp/"):
                            parts = inc.split("/")
                            if len(parts) < 3:
                                continue  # mixp/mixp.h
                            target = parts[1]
                            ok = target in allowed or m in GRAPH_CORE.get(inc, ()) or (
                                core and inc in GRAPH_CORE)
                        else:
                            parts = inc.split("/")
                            target = parts[0]
                            if len(parts) == 1 or target == m:
                                continue  # a header of the same folder / module
                            if m != "backend" and inc.startswith(BACKEND_IMPL):
                                errors.append(f"{rel}:{n}: includes {inc}, an internal header of "
                                              "a backend implementation (only backend may; call "
                                              "the Backend or a header of include/mixp/backend/)")
                                continue
                            who = SHARED_INTERNAL.get(inc)
                            ok = who == "*" or (who is not None and m in who)
                        if ok:
                            continue
                        if (rel, inc) in KNOWN:
                            seen_known.add((rel, inc))
                            continue
                        errors.append(f"{rel}:{n}: includes {inc} ({m} may include: "
                                      f"{', '.join(sorted(allowed - {m}))}; internal headers of "
                                      "other modules only as docs/architecture.md 2.2 lists)")
    for key, why in KNOWN.items():
        if key not in seen_known:
            errors.append(f"{key[0]}: no longer includes {key[1]} ({why}): remove it from KNOWN "
                          "in tests/lint/layering.py")
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} layering problem(s); the rule: docs/architecture.md 2.2")
        return 1
    print("layering: every include follows docs/architecture.md 2.2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
