#!/usr/bin/env bash
# Installs every Debian package that mixp's build, tests, benchmarks and demo need. Idempotent:
# when everything is already installed it only checks. Runs as root, or through sudo.
set -euo pipefail
# Why each package is here: docs/building.md. One is surprising: ocl-icd-opencl-dev. Debian builds
# oneDNN with its OpenCL GPU runtime, so /usr/lib/x86_64-linux-gnu/cmake/dnnl/dnnl-config.cmake
# calls find_package(OpenCL) and fails without the OpenCL headers and loader; libdnnl-dev only
# *recommends* them, and we install with --no-install-recommends.
packages=(
  cmake ninja-build g++ pkg-config git
  libdnnl-dev ocl-icd-opencl-dev zlib1g-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist fortunes-min
  python3 python3-numpy python3-torch libopenblas0-pthread
  chromium
  pybind11-dev python3-dev python3-pytest
  libsentencepiece-dev sentencepiece
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "bootstrap: installing ${missing[*]}"
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
