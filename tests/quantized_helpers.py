"""Shared helpers and tolerances of the quantized-weight tests (``test_quantized*.py``).

Each quantized op is compared (1) with the same op on ``dequantize_weight(q)`` — tight:
the packed routes dequantize to float32 and then run the dense kernels, so the results
agree to float32 rounding (``TIGHT``) — and with the NumPy oracle on the dequantized
weight (``tests/reference/conv.py``, 1e-4 as in ``test_conv.py``); and (2) with the op on
the original float weight — loose, set by the quantization step:

=====  =============================  ====================================
bits   (relative Frobenius, max/max)  measured
=====  =============================  ====================================
8      ``LOOSE[8] = (0.01, 0.02)``    0.002-0.004 / 0.002-0.005
4      ``LOOSE[4] = (0.12, 0.20)``    0.04-0.07 / 0.04-0.09
=====  =============================  ====================================

(weights uniform in ``±sqrt(1 / (C_in K))`` as the modules initialise them; measured
over random_sparse / dense_block / batched, C_in 3..64; the affine step is
``(max - min) / (2**bits - 1)`` per group of C_in, so the error scales with 2**-bits.)
The loose check runs on clouds with at least 50 rows (fewer terms give noisier ratios).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from lattice.core import SparseTensor

TIGHT = 1e-5
LOOSE = {8: (0.01, 0.02), 4: (0.12, 0.20)}


def rand_weight(shape, seed=1, fan_in=None):
    rng = np.random.default_rng(seed)
    s = np.sqrt(1.0 / (fan_in or shape[-1]))
    return mx.array(rng.uniform(-s, s, shape).astype(np.float32))


def rand_input(coords, c_in, stride=1, seed=0, dtype=mx.float32):
    f = np.random.default_rng(seed).standard_normal((len(coords), c_in)).astype(np.float32)
    return SparseTensor(np.asarray(coords, np.int32), mx.array(f).astype(dtype), stride)


def as_np(a) -> np.ndarray:
    return np.asarray(mx.array(a).astype(mx.float32), dtype=np.float64)


def peak(a: np.ndarray) -> float:
    return float(np.abs(a).max()) if a.size else 0.0


def assert_tight(a, b):
    a, b = as_np(a), as_np(b)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=TIGHT, atol=TIGHT * max(1.0, peak(b)))


def assert_loose(a, b, bits):
    a, b = as_np(a), as_np(b)
    fro, top = LOOSE[bits]
    assert np.linalg.norm(a - b) <= fro * np.linalg.norm(b)
    assert np.abs(a - b).max() <= top * np.abs(b).max()
