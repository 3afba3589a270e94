#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs to run on a GPU machine that cannot build mixp: the lent
# device machines of this workplace have nvcc, the CUDA libraries and a driver, but none of
# mixp's other dependencies (oneDNN, fmt, Open MPI, GoogleTest...) and no network (docs/cuda.md,
# "Running gpu-check.sh"). Run it here, on the CPU machine whose toolkit built the CUDA backend;
# it writes .gpu-pack/mixp-gpu.tar.xz (about 15 MB): bin/ (mixp, mixp_test_cuda, mixp_cuda_gemm),
# lib/ (libmixp and every shared library they load that is neither glibc/libstdc++ nor CUDA's:
# those come from the GPU machine), and llmc/ (llm.c's train_gpt2.cu and llmc/ headers, which
# gpu-check.sh builds there with nvcc for the GPT-2 comparison; the GPU machine has no network).
# llm.c's source comes from MIXP_LLMC_DIR (a checkout), else /work/llmc, else the bare mirror
# MIXP_LLMC_GIT (default /work/.mirror/karpathy+llm.c/repo) through `git archive HEAD`; without
# any of them the pack has no llmc/ and gpu-check.sh reports the comparison as not run. Then, on
# the GPU machine:
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
# llm.c (only what train_gpt2.cu includes: llmc/*.h, *.cuh, cudnn_att.*).
llmc_dir="${MIXP_LLMC_DIR:-/work/llmc}"
llmc_git="${MIXP_LLMC_GIT:-/work/.mirror/karpathy+llm.c/repo}"
llmc_from=""
if [ -f "$llmc_dir/train_gpt2.cu" ] && [ -d "$llmc_dir/llmc" ]; then
  mkdir -p "$stage/llmc"
  cp -r "$llmc_dir/train_gpt2.cu" "$llmc_dir/llmc" "$stage/llmc/"
  llmc_from="$llmc_dir at $(git -C "$llmc_dir" rev-parse --short HEAD 2>/dev/null || echo '?')"
elif git --git-dir="$llmc_git" rev-parse HEAD >/dev/null 2>&1; then
  mkdir -p "$stage/llmc"
  git --git-dir="$llmc_git" archive HEAD train_gpt2.cu llmc | tar -C "$stage/llmc" -xf -
  llmc_from="$llmc_git at $(git --git-dir="$llmc_git" rev-parse --short HEAD)"
else
  echo "gpu-pack: no llm.c source (MIXP_LLMC_DIR or MIXP_LLMC_GIT); the pack has no llmc/" >&2
fi
{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
  echo "packed $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) from $build"
  "$stage/bin/mixp" doctor --json | python3 -c 'import json,sys; c=json.load(sys.stdin)["cuda_backend"]; print("cuda", c["toolkit_version"], "sm", c["architectures"])'
  echo "llm.c: ${llmc_from:-not packed}"
  (cd "$stage" && ls -l bin lib)
} >"$stage/MANIFEST"

mkdir -p "$root/.gpu-pack"
exclude="$(git rev-parse --git-common-dir)/info/exclude"
grep -qx '/.gpu-pack/' "$exclude" 2>/dev/null || echo '/.gpu-pack/' >>"$exclude"
tar -C "$stage" -cf - bin lib MANIFEST $( [ -d "$stage/llmc" ] && echo llmc ) \
  | xz -T0 -6 >"$root/.gpu-pack/mixp-gpu.tar.xz.tmp"
mv "$root/.gpu-pack/mixp-gpu.tar.xz.tmp" "$root/.gpu-pack/mixp-gpu.tar.xz"
cp "$stage/MANIFEST" "$root/.gpu-pack/MANIFEST"
echo "gpu-pack: $(du -h "$root/.gpu-pack/mixp-gpu.tar.xz" | cut -f1) in .gpu-pack/mixp-gpu.tar.xz"
echo "on the GPU machine: scripts/gpu-check.sh --prebuilt .gpu-pack/mixp-gpu.tar.xz --out DIR"
