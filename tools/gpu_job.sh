#!/usr/bin/env bash
# lattice's GPU work on the lent GPU machine, and spconv beside it on the same card
# (CONTRIBUTING.md, "Running on a lent GPU, with spconv beside it"). Idempotent: what it
# makes there lies under build/ (ignored, so it survives between calls on a warm machine)
# and is made once. Needs no internet there.
#
# Here, where pip reaches an index (once; all three folders are ignored):
#   fetch          .gpu/ (MLX and its CUDA wheel, ../shared/tools/gpu/prepare.sh) if it lacks
#                  pyproject's MLX; build/gpu-wheels/ (pyproject's nanobind and
#                  scipy-openblas32, which the extension's build needs); build/peer-wheels/
#                  (tools/peer_wheels.sh: spconv-cu126 and its packages)
#   base REV       build/base/: the Python, kernels and benchmarks of commit REV (git archive),
#                  the "before" of an A/B on the same card; refused where REV's C++ (csrc/,
#                  CMakeLists.txt) differs from the tree's, whose extension it borrows there
# There (python3 with torch, nvcc, cmake, ninja), from the repository root:
#   setup          install .gpu/*.whl and build/gpu-wheels/*.whl into build/site, link the
#                  machine's nvidia libraries there, build the extension in build/gpu and put
#                  it in lattice/ (with ./mlx and ./scipy_openblas32 linked beside it for its
#                  RPATH); skips what is done
#   test [FILE...] [-- PYTEST ARGS]
#                  LATTICE_TEST_DEVICE=gpu python3 -m pytest FILE... ARGS
#   bench [N]      bench_conv_gpu.py (which saves build/shells.npy), bench_lazy_rows.py
#                  --repeats N (default 5), profile_cuda.py, profile_cuda.py --launches
#   ab [N] [conv]  before / after on this card: bench_lazy_rows.py --repeats N (default 5) in
#                  build/base (carried; made here by `base REV`, with this tree's extension)
#                  and in the tree, alternating, two rounds: build/results/ab_{base,tree}_R.json;
#                  with `conv`, bench_conv_gpu.py --repeats N instead (one convolution, fresh
#                  and reused): build/results/ab_conv_{base,tree}_R.json
#   kernels [N]    Nsight Compute's per-kernel summary (gpu__time_duration.sum) of N (default
#                  2) MinkUNet14 eval forwards, then N training steps, at 484,637 voxels
#                  (profile_step_gpu.py; the first of each compiles):
#                  build/results/kernels_forward.txt, build/results/kernels.txt
#   peer [N]       spconv: build/peer-wheels into build/peer-site (once), then on
#                  build/shells.npy spconv_conv_gpu.py (float32 also with --tf32) and
#                  spconv_unet.py --device cuda --classes 20 --stem-algo Native, forward
#                  and --train, at all rows and the first tenth (bench_lazy_rows.py's two
#                  sizes), and at all rows with --tf32 (MLX's float32 uses TF32), --repeats
#                  N. The stem is Native because spconv's implicit-GEMM kernel for its 4
#                  input channels is not in the wheel and fails to compile with CUDA 13's
#                  NVRTC (seen on an H100, 2026-12-06; the --tf32 runs failed there on the
#                  same stem, before --stem-algo; with it they have not run yet)
#   help           this text
#
# Verbs run in the order given:  bash tools/gpu_job.sh setup test tests/test_cuda_routes.py -- -n 8 bench 5
# A test's pytest arguments run to the next verb name that is not an option's value
# (`-k bench` stays pytest's). Every step prints its time; a failed step is recorded and
# the next one runs (a failed setup stops the call); the exit status is 1 if any failed.
# Results: build/results/ (cards.txt names the GPU of each bench and peer run); those of
# this call are copied to $OUT when it is set.
# Environment: PYTHON (python3), PEER_PYTHON (the python with torch; default python3, else
# /opt/torch/.venv/bin/python3), GPU_JOB_DRY_RUN=1 (print the commands, run none).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python3}
DRY=${GPU_JOB_DRY_RUN:-0}
RESULTS=build/results
VERBS=" fetch base setup test bench ab kernels peer help "
# pytest options whose value is the next word: a verb name there is the value, not a verb
VALUE_OPTS=" -k -m -n -p -c -o -W -r --maxfail --deselect --ignore --ignore-glob --durations --tb
  --timeout --dist --rootdir --basetemp --junitxml --junit-xml --log-level --confcutdir "
SUMMARY=()
FAILED=()
PEER_ENV=(env "PYTHONPATH=$PWD/build/peer-site" PYTHONUNBUFFERED=1) # the peer's python, with build/peer-site
T_START=$(date +%s.%N)

log() { printf '[gpu_job %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# x CMD...: runs CMD, or prints it under GPU_JOB_DRY_RUN=1
x() {
  if [ "$DRY" = 1 ]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
    return 0
  fi
  "$@"
}

# xlog FILE CMD...: x CMD, its output also written to FILE
xlog() {
  local file=$1
  shift
  if [ "$DRY" = 1 ]; then
    x "$@"
    return 0
  fi
  "$@" 2>&1 | tee "$file"
}

# step NAME CMD...: times CMD, records its exit status
step() {
  local name=$1 rc=0 t0 dt
  shift
  t0=$(date +%s.%N)
  log "start: $name"
  "$@" || rc=$?
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  log "done:  $name: $dt s, exit $rc"
  SUMMARY+=("$(printf '%8s s  exit %-3s %s' "$dt" "$rc" "$name")")
  [ "$rc" -eq 0 ] || FAILED+=("$name")
  return "$rc"
}

finish() {
  local total
  total=$(awk -v a="$T_START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ ${#SUMMARY[@]} -gt 0 ]; then
    log "steps:"
    printf '  %s\n' "${SUMMARY[@]}"
  fi
  if [ -n "${OUT:-}" ] && [ -d "$RESULTS" ] && [ "$DRY" != 1 ]; then
    find "$RESULTS" -maxdepth 1 -type f -newer build/.gpu_job_start -exec cp {} "$OUT"/ \;
    log "copied to \$OUT: $(find "$RESULTS" -maxdepth 1 -type f -newer build/.gpu_job_start -printf '%f ')"
  fi
  if [ ${#FAILED[@]} -gt 0 ]; then
    log "FAILED: ${FAILED[*]} (total $total s)"
    exit 1
  fi
  log "all steps passed (total $total s)"
  exit 0
}

die() {
  log "error: $*"
  FAILED+=("$1")
  finish
}

pin() { # pin NAME: the version pyproject.toml pins for NAME
  python3 - "$1" <<'PY'
import pathlib, re, sys
text = pathlib.Path("pyproject.toml").read_text()
print(re.search(rf"[\"']{re.escape(sys.argv[1])}(?:\[[^\]]*\])?\s*==\s*([0-9.]+)", text).group(1))
PY
}

card() { # the GPU's name and UUID, one line
  nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader 2>/dev/null | head -n1
}

record_card() { # record_card VERB: appends "VERB date name, uuid, driver" to cards.txt
  [ "$DRY" = 1 ] && return 0
  mkdir -p "$RESULTS"
  printf '%s %s %s\n' "$1" "$(date -u +%FT%TZ)" "$(card)" >>"$RESULTS/cards.txt"
}

# ---- fetch (here) ---------------------------------------------------------------------

verb_fetch() {
  local mlx nb ob tools=${GPU_TOOLS:-../shared/tools/gpu}
  if ! { mlx=$(pin mlx) && nb=$(pin nanobind) && ob=$(pin scipy-openblas32); }; then
    die "fetch: pins not read from pyproject.toml"
  fi
  if ! compgen -G ".gpu/mlx-$mlx-*.whl" >/dev/null || ! compgen -G ".gpu/mlx_cuda_13-$mlx-*.whl" >/dev/null; then
    step "fetch: .gpu (MLX $mlx CUDA)" x bash "$tools/prepare.sh" "$mlx" || die "fetch: prepare.sh failed"
  else
    log "fetch: .gpu holds MLX $mlx already"
  fi
  x rm -rf build/gpu-wheels
  step "fetch: build/gpu-wheels (nanobind $nb, scipy-openblas32 $ob)" \
    x python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d build/gpu-wheels "nanobind==$nb" "scipy-openblas32==$ob" || die "fetch: pip download failed"
  step "fetch: build/peer-wheels" x bash tools/peer_wheels.sh build/peer-wheels || die "fetch: peer wheels"
  [ "$DRY" = 1 ] || du -sh .gpu build/gpu-wheels build/peer-wheels
}

verb_base() {
  local rev=$1
  git rev-parse --verify -q "$rev^{commit}" >/dev/null || die "base: no commit '$rev' here"
  if ! git diff --quiet "$rev" -- csrc CMakeLists.txt; then
    die "base: $rev's C++ differs from the tree's (csrc/, CMakeLists.txt): its extension must be built for it"
  fi
  x rm -rf build/base
  x mkdir -p build/base
  step "base: build/base = $rev" \
    bash -c 'git archive "$1" lattice mlx_lattice benchmarks kernels cuda | tar -x -C build/base' _ "$rev" ||
    die "base"
  [ "$DRY" = 1 ] || git rev-parse "$rev" >build/base/REV
  [ "$DRY" = 1 ] || du -sh build/base
}

# ---- setup (there) --------------------------------------------------------------------

site_env() {
  case ":${PYTHONPATH:-}:" in
    *":$PWD/build/site:"*) ;;
    *) export PYTHONPATH="$PWD/build/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" ;;
  esac
  export PYTHONUNBUFFERED=1
}

wheel_list() { # "name size" of each wheel given that exists
  local w
  for w in "$@"; do
    [ -f "$w" ] && printf '%s %s\n' "$(basename "$w")" "$(stat -c %s "$w")"
  done
  return 0
}

# install_wheels DIR PY WHEEL...: the wheels into DIR (pip --target), once per set of wheels
# (DIR/.wheels lists the set installed); with no wheel carried, an installed DIR is kept
install_wheels() {
  local dir=$1 py=$2 want w wheels=()
  shift 2
  for w in "$@"; do [ -f "$w" ] && wheels+=("$w"); done # an unmatched glob stays a pattern
  set -- "${wheels[@]}"
  want=$(wheel_list "$@")
  if [ -z "$want" ]; then
    [ -f "$dir/.wheels" ] && { log "no wheels carried; $dir kept"; return 0; }
    log "no wheels carried and no $dir: carry them (made here by fetch)"
    return 2
  fi
  if [ -f "$dir/.wheels" ] && [ "$(cat "$dir/.wheels")" = "$want" ]; then
    log "$dir holds these wheels already"
    return 0
  fi
  x rm -rf "$dir"
  x "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$dir" "$@" || return
  [ "$DRY" = 1 ] || printf '%s\n' "$want" >"$dir/.wheels"
}

install_site() {
  compgen -G "build/gpu-wheels/nanobind-*.whl" >/dev/null || log "warning: no nanobind wheel carried: the machine's own is used"
  compgen -G "build/gpu-wheels/scipy_openblas32-*.whl" >/dev/null || log "warning: no scipy-openblas32 wheel carried"
  install_wheels build/site "$PY" .gpu/*.whl build/gpu-wheels/*.whl
}

# rpath_links DIR: DIR/mlx and DIR/scipy_openblas32 -> build/site, where the RPATH of an
# extension in DIR/lattice ($ORIGIN/../mlx/lib, $ORIGIN/../scipy_openblas32/lib) looks
rpath_links() {
  local pkg
  for pkg in mlx scipy_openblas32; do
    if [ -e "$1/$pkg" ] && [ ! -L "$1/$pkg" ]; then
      log "error: $1/$pkg exists and is not a link"
      return 1
    fi
    x ln -sfn "$PWD/build/site/$pkg" "$1/$pkg"
  done
}

link_tree() { # the machine's nvidia libraries into build/site; ./mlx and ./scipy_openblas32 for _ext's RPATH
  local purelib
  if [ "$DRY" = 1 ]; then
    purelib='<purelib of python3>'
  else
    purelib=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return
  fi
  if [ "$DRY" = 1 ] || [ -d "$purelib/nvidia" ]; then
    x ln -sfn "$purelib/nvidia" build/site/nvidia
  else
    log "warning: $purelib/nvidia missing: libmlx.so may not find cuBLAS, cuDNN, NVRTC"
  fi
  rpath_links .
}

configure_ext() {
  local cfg=(-S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release "-DPython_EXECUTABLE=$(command -v "$PY")")
  local h lib
  h=$(find -L "$PWD/build/site/nvidia" -name cudnn.h 2>/dev/null | head -n1)
  lib=$(find -L "$PWD/build/site/nvidia" -name 'libcudnn.so*' 2>/dev/null | head -n1)
  [ -n "$h" ] && cfg+=("-DCUDNN_INCLUDE_PATH=$(dirname "$h")")
  [ -n "$lib" ] && cfg+=("-DCUDNN_LIBRARY_PATH=$(dirname "$lib")")
  if ! command -v nvcc >/dev/null && [ -d /usr/local/cuda ]; then cfg+=(-DCUDAToolkit_ROOT=/usr/local/cuda); fi
  x cmake "${cfg[@]}"
}

build_ext() {
  local ext
  site_env
  if [ -f build/gpu/build.ninja ]; then
    log "setup: build/gpu configured already"
  else
    configure_ext || return
  fi
  x cmake --build build/gpu -j "$(nproc)" || return
  if [ "$DRY" = 1 ]; then
    x cp -p build/gpu/_ext.cpython-312-x86_64-linux-gnu.so lattice/
    return 0
  fi
  ext=$(find build/gpu -maxdepth 1 -name '_ext*.so' | head -n1)
  [ -n "$ext" ] || { log "no build/gpu/_ext*.so after the build"; return 1; }
  cmp -s "$ext" "lattice/$(basename "$ext")" || cp -p "$ext" lattice/
}

check_lattice() {
  site_env
  x "$PY" -c 'import mlx.core as mx, lattice
from lattice import _ext
i = lattice.backend_info()
print("mlx", mx.__version__, mx.default_device(), "| lattice", lattice.__version__, "| gpu", i.gpu, "| kernels", i.gpu_kernels)'
}

verb_setup() {
  step "setup: wheels -> build/site" install_site || die "setup"
  step "setup: links" link_tree || die "setup"
  step "setup: build the extension" build_ext || die "setup"
  step "setup: import lattice" check_lattice || die "setup"
}

need_lattice() {
  [ "$DRY" = 1 ] && return 0
  if [ ! -f build/site/.wheels ] || ! compgen -G "lattice/_ext*.so" >/dev/null; then
    log "error: no build/site or lattice/_ext*.so: run setup first (this call, or earlier on this warm machine)"
    return 2
  fi
  link_tree && site_env
}

# ---- test, bench (there) --------------------------------------------------------------

run_pytest() {
  mkdir -p "$RESULTS"
  xlog "$RESULTS/test.log" env LATTICE_TEST_DEVICE=gpu "$PY" -m pytest "$@"
}

verb_test() {
  need_lattice || die "test"
  step "test $*" run_pytest "$@"
}

verb_bench() {
  local n=$1
  need_lattice || die "bench"
  mkdir -p "$RESULTS"
  record_card bench
  step "bench_conv_gpu (saves build/shells.npy)" \
    x "$PY" benchmarks/bench_conv_gpu.py --save-coords build/shells.npy --json "$RESULTS/conv_gpu.json"
  step "bench_lazy_rows --repeats $n" \
    x "$PY" benchmarks/bench_lazy_rows.py --repeats "$n" --json "$RESULTS/lazy_rows.json"
  step "profile_cuda" xlog "$RESULTS/profile_cuda.txt" "$PY" benchmarks/profile_cuda.py
  step "profile_cuda --launches" xlog "$RESULTS/launches.txt" "$PY" benchmarks/profile_cuda.py --launches
}

verb_ab() {
  local n=$1 what=${2:-} r ext bench=bench_lazy_rows.py tag=ab
  [ "$what" = conv ] && bench=bench_conv_gpu.py tag=ab_conv
  need_lattice || die "ab"
  [ -f build/base/REV ] || [ "$DRY" = 1 ] || die "ab: no build/base: make it here with 'base REV' and carry build/base"
  ext=$(compgen -G "lattice/_ext*.so" | head -n1)
  x cp -p "${ext:-lattice/_ext.so}" build/base/lattice/
  rpath_links build/base || die "ab"
  mkdir -p "$RESULTS"
  record_card ab
  for r in 1 2; do
    step "ab round $r: base ($(cat build/base/REV 2>/dev/null | cut -c1-10))" \
      x env PYTHONPATH="$PWD/build/site:$PWD/build/base" "$PY" "build/base/benchmarks/$bench" \
      --repeats "$n" --json "$PWD/$RESULTS/${tag}_base_$r.json"
    step "ab round $r: tree" \
      x "$PY" "benchmarks/$bench" --repeats "$n" --json "$RESULTS/${tag}_tree_$r.json"
  done
}

verb_kernels() {
  local n=$1
  need_lattice || die "kernels"
  mkdir -p "$RESULTS"
  record_card kernels
  step "ncu per-kernel summary of $n forwards" \
    xlog "$RESULTS/kernels_forward.txt" ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    "$PY" benchmarks/profile_step_gpu.py --steps "$n" --forward
  step "ncu per-kernel summary of $n training steps" \
    xlog "$RESULTS/kernels.txt" ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    "$PY" benchmarks/profile_step_gpu.py --steps "$n"
}

# ---- peer (there) ---------------------------------------------------------------------

peer_python() { # the python with torch that sees a GPU
  local p
  for p in ${PEER_PYTHON:-} python3 /opt/torch/.venv/bin/python3; do
    command -v "$p" >/dev/null || continue
    if [ "$DRY" = 1 ] || "$p" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

check_card() { # warns where the peer's GPU is not the one lattice's last bench ran on
  local last now
  [ "$DRY" = 1 ] && return 0
  last=$(grep '^bench ' "$RESULTS/cards.txt" 2>/dev/null | tail -n1 | cut -d' ' -f3-)
  now=$(card)
  if [ -z "$last" ]; then
    log "warning: no bench on this machine recorded: lattice's numbers are not beside these"
  elif [ "${last#*, }" != "${now#*, }" ]; then
    log "warning: not the GPU of lattice's last bench ($last); now: $now"
  else
    log "peer: the GPU of lattice's last bench: $now"
  fi
}

unet() { # unet PY ROWS ARGS...: one spconv_unet.py run, its JSON line appended to spconv_unet.jsonl
  local py=$1 rows=$2
  shift 2
  local cmd=("${PEER_ENV[@]}" "$py" benchmarks/peers/spconv_unet.py --coords build/shells.npy --rows "$rows" "$@")
  if [ "$DRY" = 1 ]; then
    x "${cmd[@]}"
    return 0
  fi
  "${cmd[@]}" >>"$RESULTS/spconv_unet.jsonl" && tail -n1 "$RESULTS/spconv_unet.jsonl"
}

verb_peer() {
  local n=$1 py all rows mode extra
  py=$(peer_python) || die "peer: no python with torch seeing a GPU (tried \$PEER_PYTHON, python3, /opt/torch/.venv/bin/python3)"
  log "peer: $py"
  step "peer: wheels -> build/peer-site" install_wheels build/peer-site "$py" build/peer-wheels/*.whl || die "peer"
  if [ ! -f build/shells.npy ]; then
    log "peer: build/shells.npy missing (no bench here): made anew, the same shells() rows"
    step "peer: build/shells.npy" x "$py" benchmarks/bench_conv_gpu.py --save-coords build/shells.npy --save-only ||
      die "peer"
  fi
  mkdir -p "$RESULTS"
  check_card
  record_card peer
  step "peer: import spconv" x "${PEER_ENV[@]}" "$py" -c 'import torch, spconv, spconv.pytorch
print("torch", torch.__version__, "| spconv", spconv.__version__, "|", torch.cuda.get_device_name())' || die "peer"
  step "spconv_conv_gpu" x "${PEER_ENV[@]}" "$py" benchmarks/peers/spconv_conv_gpu.py build/shells.npy \
    --json "$RESULTS/spconv_conv_gpu.json"
  step "spconv_conv_gpu --tf32 (float32)" x "${PEER_ENV[@]}" "$py" benchmarks/peers/spconv_conv_gpu.py \
    build/shells.npy --tf32 --dtypes float32 --json "$RESULTS/spconv_conv_gpu_tf32.json"
  if [ "$DRY" = 1 ]; then
    all=484637
  else
    all=$("$py" -c 'import numpy; print(len(numpy.load("build/shells.npy")))') || die "peer: build/shells.npy unreadable"
    : >"$RESULTS/spconv_unet.jsonl"
  fi
  # bench_lazy_rows.py's two sizes, spconv's default float32; then with TF32, as MLX's float32 runs
  for rows in "$all" $((all / 10)) "$all tf32"; do
    for mode in forward train; do
      extra=()
      [ "$mode" = train ] && extra+=(--train)
      [ "${rows#* }" = tf32 ] && extra+=(--tf32)
      step "spconv_unet $mode N=${rows% *} ${extra[*]} --repeats $n" unet "$py" "${rows% *}" --device cuda \
        --classes 20 --repeats "$n" --stem-algo Native "${extra[@]}"
    done
  done
}

# ---- the verbs ------------------------------------------------------------------------

is_verb() { [[ $VERBS == *" $1 "* ]]; }

walk() { # walk RUN ARGS...: parses the verbs (a typo fails before anything runs); runs them if RUN=1
  local run=$1 verb n prev what
  shift
  while (($#)); do
    verb=$1
    shift
    case $verb in
      fetch | setup | help) [ "$run" = 1 ] && "verb_$verb" ;;
      base)
        (($#)) || { log "error: base needs a commit (base REV)"; exit 2; }
        [ "$run" = 1 ] && verb_base "$1"
        shift
        ;;
      bench | peer | kernels | ab)
        n=5
        [ "$verb" = kernels ] && n=2
        if (($#)) && [[ $1 =~ ^[0-9]+$ ]]; then
          n=$1
          shift
        fi
        [ "$n" -ge 1 ] || { log "error: $verb N must be at least 1, got $n"; exit 2; }
        what=""
        if [ "$verb" = ab ] && (($#)) && [ "$1" = conv ]; then
          what=conv
          shift
        fi
        [ "$run" = 1 ] && "verb_$verb" "$n" $what
        ;;
      test)
        local files=() args=()
        while (($#)) && [ "$1" != -- ] && ! is_verb "$1"; do
          files+=("$1")
          shift
        done
        if (($#)) && [ "$1" = -- ]; then
          shift
          prev=""
          while (($#)); do
            if is_verb "$1" && [[ $VALUE_OPTS != *" $prev "* ]]; then break; fi
            args+=("$1")
            prev=$1
            shift
          done
        fi
        [ "$run" = 1 ] && verb_test "${files[@]}" "${args[@]}"
        ;;
      *)
        log "error: unknown verb '$verb' (verbs:$VERBS)"
        exit 2
        ;;
    esac
  done
  return 0
}

verb_help() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

if [ $# -eq 0 ] || [ "$*" = help ]; then
  verb_help
  [ $# -eq 1 ]
  exit
fi
walk 0 "$@"
if [ "$DRY" != 1 ]; then
  mkdir -p build && touch build/.gpu_job_start
fi
log "host $(hostname) | GPU: $(card || true) | $("$PY" --version 2>&1) | commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
walk 1 "$@"
finish
