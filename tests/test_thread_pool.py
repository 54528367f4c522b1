"""The native thread pool's hand-offs (csrc/core/parallel.h): back-to-back parallel regions
(a worker still spinning takes the next job), regions apart by more than the spin (workers
asleep, woken by the condition variable), and callers on several Python threads at once
(a busy pool runs the job on fresh threads) all give the single-threaded answer, and none
hangs. Run in a child with more workers than this machine has cores."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    import numpy as np
    import mlx.core as mx
    import lattice
    from lattice.ops import voxelize

    rng = np.random.default_rng(7)
    pts = (rng.random((60_000, 3)) * 4.0).astype(np.float32)
    feats = rng.normal(size=(60_000, 5)).astype(np.float32)
    p, f = mx.array(pts), mx.array(feats)

    def once():
        t = voxelize(p, f, 0.05)
        q = lattice.sparse_quantize(p, 0.05)
        return np.asarray(t.coords), np.asarray(t.feats), np.asarray(q.inverse_rows)

    ref = once()
    results = []
    for _ in range(150):  # back to back: the workers spin between regions
        results.append(once())
    for _ in range(20):  # past the spin: the workers sleep and are woken
        time.sleep(0.002)
        results.append(once())
    out, errors = [], []

    def caller():
        try:
            for _ in range(10):
                out.append(once())
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    results += out
    bad = sum(not all(np.array_equal(a, b) for a, b in zip(r, ref)) for r in results)
    np.savez(sys.argv[1], coords=ref[0], feats=ref[1], inverse=ref[2], runs=len(results), bad=bad)
    """
)


def test_pool_hand_offs_give_the_one_thread_answer(tmp_path):
    got = {}
    for threads in ("1", "4"):
        path = tmp_path / f"t{threads}.npz"
        env = dict(os.environ, LATTICE_NUM_THREADS=threads)
        subprocess.run([sys.executable, "-P", "-c", _SCRIPT, str(path)], env=env, check=True, timeout=600)
        got[threads] = np.load(path)
    for threads, r in got.items():
        assert int(r["runs"]) == 210 and int(r["bad"]) == 0, threads
    for key in ("coords", "feats", "inverse"):
        np.testing.assert_array_equal(got["1"][key], got["4"][key], err_msg=key)
    # and the voxels are NumPy's (the child's points, made again here)
    pts = (np.random.default_rng(7).random((60_000, 3)) * 4.0).astype(np.float32)
    want = np.unique(np.floor(pts.astype(np.float64) / 0.05).astype(np.int64), axis=0)
    have = got["4"]["coords"][:, 1:].astype(np.int64)
    np.testing.assert_array_equal(have[np.lexsort(have.T[::-1])], want)
