#!/usr/bin/env bash
# Builds lattice._ext with AddressSanitizer + UndefinedBehaviorSanitizer into its own build
# directory and runs the native tests against it (CONTRIBUTING.md, "Sanitizer build").
#
#   tools/sanitize.sh                 # build (incremental) + the native test set
#   tools/sanitize.sh tests/test_conv.py -k subm     # build + these pytest arguments
#   SANITIZE_BUILD_DIR=/tmp/asan tools/sanitize.sh    # another build directory
#
# The installed (editable) extension is left alone: the sanitized module is loaded in its
# place by a sitecustomize.py that this script writes next to the build and puts on
# PYTHONPATH, so child interpreters started by the tests load it too. libasan is preloaded
# (the interpreter itself is not instrumented) and leak detection is off (CPython keeps
# its allocations until exit). Any ASan error aborts the run; UBSan reports are logged and
# fail the run at the end. Exit status: pytest's, or 1 when UBSan reported anything.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SANITIZE_BUILD_DIR:-$ROOT/build/sanitize}"
PY="${PYTHON:-python}"
PY="$(command -v "$PY")"

NATIVE_TESTS=(
  tests/test_native_checks.py tests/test_smoke.py
  tests/test_conv.py tests/test_conv_grad.py tests/test_nn_conv.py
  tests/test_pool.py tests/test_pool_grad.py tests/test_pool_global.py tests/test_pool_modules.py
  tests/test_pool_upsample.py tests/test_pool_windows.py
  tests/test_relations.py tests/test_neighbors.py tests/test_kernel.py tests/test_coordsets.py
  tests/test_voxel_accumulator.py tests/test_algebra.py tests/test_points.py
)

echo "== configure + build $BUILD (LATTICE_SANITIZE=ON)"
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -DLATTICE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPython_EXECUTABLE="$PY" >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 2; }
cmake --build "$BUILD" --target _ext -j "$(nproc)"
EXT="$(find "$BUILD" -maxdepth 1 -name '_ext*.so' | head -n 1)"
[ -n "$EXT" ] || { echo "no _ext*.so under $BUILD" >&2; exit 2; }

# The sanitized module replaces lattice._ext in this interpreter and its children.
SITE="$BUILD/site"
mkdir -p "$SITE"
cat >"$SITE/sitecustomize.py" <<'EOF'
import importlib.util
import os
import sys


class _SanitizedExt:
    """Resolves lattice._ext to the sanitizer build named by LATTICE_SANITIZED_EXT."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "lattice._ext":
            return importlib.util.spec_from_file_location(name, os.environ["LATTICE_SANITIZED_EXT"])
        return None


sys.meta_path.insert(0, _SanitizedExt)
EOF

SP="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
LIBASAN="$("${CXX:-c++}" -print-file-name=libasan.so)"
# libstdc++ is preloaded too: the interpreter does not link it, and ASan's __cxa_throw
# interceptor must find the real one at start-up ("CHECK failed ... real___cxa_throw").
LIBSTDCXX="$("${CXX:-c++}" -print-file-name=libstdc++.so.6)"
LOGDIR="$BUILD/reports"
rm -rf "$LOGDIR" && mkdir -p "$LOGDIR"

export LATTICE_SANITIZED_EXT="$EXT"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
# The build tree's rpath ($ORIGIN/../mlx/lib) does not resolve from build/: name the libraries.
export LD_LIBRARY_PATH="$SP/mlx/lib:$SP/scipy_openblas32/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_PRELOAD="$LIBASAN:$LIBSTDCXX${LD_PRELOAD:+:$LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:print_summary=1:log_path=$LOGDIR/asan"
export UBSAN_OPTIONS="print_stacktrace=1:report_error_type=1:log_path=$LOGDIR/ubsan"

"$PY" -c "import lattice._ext as e, sys; assert e.__file__ == '$EXT', e.__file__; print('== testing', e.__file__)"

if [ "$#" -eq 0 ]; then set -- "${NATIVE_TESTS[@]}"; fi
cd "$ROOT"
set +e
"$PY" -m pytest -q -m "not slow" -p no:xdist -p no:cacheprovider "$@"
status=$?
set -e

reports=("$LOGDIR"/*)
if [ -e "${reports[0]}" ]; then
  echo "== ${#reports[@]} sanitizer report(s) in $LOGDIR:"
  for f in "${reports[@]}"; do echo "-- $f"; head -n 12 "$f" | cut -c1-240; done
  [ "$status" -ne 0 ] || status=1
else
  echo "== no sanitizer reports"
fi
exit "$status"
