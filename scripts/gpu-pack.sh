#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs to run on a GPU machine that cannot build mixp: the lent
# device machines of this workplace have nvcc, the CUDA libraries and a driver, but none of
# mixp's other dependencies (oneDNN, fmt, Open MPI, GoogleTest...) and no network (docs/cuda.md,
# "Running gpu-check.sh"). Run it here, on the CPU machine whose toolkit built the CUDA backend;
# it writes .gpu-pack/mixp-gpu.tar.xz (about 15 MB): bin/ (mixp, mixp_test_cuda, mixp_cuda_gemm)
# and lib/ (libmixp and every shared library they load that is neither glibc/libstdc++ nor
# CUDA's: those come from the GPU machine). Then, on the GPU machine:
#
#   scripts/gpu-check.sh --prebuilt .gpu-pack/mixp-gpu.tar.xz --out DIR
#
#   scripts/gpu-pack.sh [BUILD_DIR]   (default build/release; must be configured with the CUDA
#                                      backend, i.e. MIXP_CUDA=AUTO with the toolkit, or ON)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build="${1:-$root/build/release}"
jobs="${MIXP_GPU_PACK_JOBS:-$(nproc)}"

cmake --build "$build" -j "$jobs" --target mixp_cli mixp_test_cuda mixp_cuda_gemm
if ! "$build/mixp" doctor --json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["cuda_backend"]["built"] else 1)'; then
  echo "gpu-pack: $build has no CUDA backend; configure it with -DMIXP_CUDA=ON (docs/cuda.md)" >&2
  exit 2
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in mixp mixp_test_cuda mixp_cuda_gemm; do
  cp "$build/$b" "$stage/bin/"
done
# Shared libraries: everything ldd resolves except the C/C++ runtime (the GPU machine's own) and
# CUDA's (its toolkit's, matching its driver).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libnvidia)'
for b in "$stage"/bin/*; do
  ldd "$b" | awk '/=>/ {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  [ -f "$path" ] || { echo "gpu-pack: $name not found ($path)" >&2; exit 2; }
  cp -L "$path" "$stage/lib/$name"
done
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
  echo "packed $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) from $build"
  "$stage/bin/mixp" doctor --json | python3 -c 'import json,sys; c=json.load(sys.stdin)["cuda_backend"]; print("cuda", c["toolkit_version"], "sm", c["architectures"])'
  (cd "$stage" && ls -l bin lib)
} >"$stage/MANIFEST"

mkdir -p "$root/.gpu-pack"
exclude="$(git rev-parse --git-common-dir)/info/exclude"
grep -qx '/.gpu-pack/' "$exclude" 2>/dev/null || echo '/.gpu-pack/' >>"$exclude"
tar -C "$stage" -cf - bin lib MANIFEST | xz -T0 -6 >"$root/.gpu-pack/mixp-gpu.tar.xz.tmp"
mv "$root/.gpu-pack/mixp-gpu.tar.xz.tmp" "$root/.gpu-pack/mixp-gpu.tar.xz"
cp "$stage/MANIFEST" "$root/.gpu-pack/MANIFEST"
echo "gpu-pack: $(du -h "$root/.gpu-pack/mixp-gpu.tar.xz" | cut -f1) in .gpu-pack/mixp-gpu.tar.xz"
echo "on the GPU machine: scripts/gpu-check.sh --prebuilt .gpu-pack/mixp-gpu.tar.xz --out DIR"
