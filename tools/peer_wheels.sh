#!/usr/bin/env bash
# The spconv GPU peer's wheels for the lent GPU machine (Python 3.12, manylinux x86_64, no
# package index there): spconv-cu126 2.3.8 cut down to sm_90 code with
# ../shared/tools/gpu/slim_cuda_wheel.py (70 MiB -> 12), cumm-cu126 0.7.11 as published (its
# size is its own NVRTC, which has no GPU code to cut), and the pure-Python packages they
# need that the machine's image lacks (pccm, ccimport, fire, lark, termcolor; pybind11 and
# portalocker too, small, though the image has them). numpy, sympy, ninja and requests come
# from the image (torch brings sympy). Run here, from the repository root, where pip reaches
# an index:
#
#     bash tools/peer_wheels.sh [OUT_DIR]        # default build/peer-wheels (ignored)
#
# Carry OUT_DIR to the GPU machine (carry: ["build/peer-wheels"]); tools/gpu_job.sh `peer`
# installs it there into build/peer-site. Environment: SLIM (the slimming script), ARCH (90).
set -euo pipefail
out=${1:-build/peer-wheels}
arch=${ARCH:-90}
slim=${SLIM:-../shared/tools/gpu/slim_cuda_wheel.py}
[ -f "$slim" ] || { echo "peer_wheels: $slim not found (set SLIM)" >&2; exit 2; }
cuda_wheels=(spconv-cu126==2.3.8 cumm-cu126==0.7.11)
pure_wheels=(pccm==0.4.16 ccimport==0.4.4 fire==0.7.1 lark==1.3.1 termcolor==3.3.0 pybind11==3.1.0
  portalocker==4.4.2)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$tmp" "${cuda_wheels[@]}" "${pure_wheels[@]}"
rm -rf "$out" && mkdir -p "$out"
python3 "$slim" "$tmp"/spconv_cu126-*.whl "$out" "$arch"
for w in "$tmp"/*.whl; do
  case $(basename "$w") in spconv_cu126-*) ;; *) cp "$w" "$out/" ;; esac
done
ls -l "$out"
du -sh "$out"
