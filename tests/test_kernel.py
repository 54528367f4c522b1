"""KernelSpec normalisation and kernel offsets."""

from __future__ import annotations

import itertools

import mlx.core as mx
import numpy as np
import pytest
from reference import relations as rr

import lattice
from lattice.core import KernelSpec
from lattice.ops import kernel_offsets


@pytest.mark.parametrize(
    "size,dilation",
    [(s, d) for s in range(1, 6) for d in (1, 2, 3)]
    + [((3, 1, 2), 1), ((2, 5, 1), (1, 3, 2)), ((4, 4, 3), (2, 1, 1))],
)
def test_kernel_offsets_match_reference(size, dilation):
    got = kernel_offsets(size, dilation)
    assert got.dtype == mx.int32
    np.testing.assert_array_equal(np.asarray(got), np.array(rr.kernel_offsets(size, dilation)).reshape(-1, 3))
    assert got.shape[0] == KernelSpec(size).volume


def test_kernel_offsets_hand_checked():
    k3 = np.asarray(kernel_offsets(3)).tolist()
    assert k3[:4] == [[-1, -1, -1], [-1, -1, 0], [-1, -1, 1], [-1, 0, -1]]  # z fastest
    assert k3[13] == [0, 0, 0]  # the centre
    assert k3[-1] == [1, 1, 1]
    k2 = np.asarray(kernel_offsets(2)).tolist()
    assert k2 == [list(p) for p in itertools.product((0, 1), repeat=3)]  # even sizes start at 0
    assert np.asarray(kernel_offsets(3, dilation=2)).tolist()[0] == [-2, -2, -2]
    assert np.asarray(kernel_offsets(1)).tolist() == [[0, 0, 0]]
    assert np.asarray(kernel_offsets(4)).tolist()[-1] == [3, 3, 3]
    assert np.asarray(kernel_offsets(5)).tolist()[0] == [-2, -2, -2]


def test_odd_offsets_are_symmetric():
    """Offset K-1-k is the negation of offset k for odd (centred) kernels."""
    for size in (1, 3, 5, (3, 1, 5)):
        off = np.asarray(kernel_offsets(size, (1, 2, 3)))
        np.testing.assert_array_equal(off[::-1], -off)


def test_kernel_spec_normalises_to_triples():
    s = KernelSpec(3)
    assert (s.size, s.stride, s.padding, s.dilation) == ((3, 3, 3), (1, 1, 1), (0, 0, 0), (1, 1, 1))
    s = KernelSpec((3, 1, 2), [2, 2, 1], np.int64(1), (1, 2, 1))
    assert (s.size, s.stride, s.padding, s.dilation) == ((3, 1, 2), (2, 2, 1), (1, 1, 1), (1, 2, 1))
    assert s.volume == 6
    assert KernelSpec(3) == KernelSpec((3, 3, 3), 1, 0, 1)
    assert hash(KernelSpec(3)) == hash(KernelSpec((3, 3, 3), 1, 0, 1))
    assert KernelSpec(3) != KernelSpec(3, dilation=2)
    np.testing.assert_array_equal(np.asarray(s.offsets()), np.array(rr.kernel_offsets((3, 1, 2), (1, 2, 1))))


def test_kernel_spec_is_frozen():
    s = KernelSpec(3)
    with pytest.raises(AttributeError):
        s.size = (1, 1, 1)


@pytest.mark.parametrize(
    "spec,pointwise,odd",
    [
        (KernelSpec(1), True, True),
        (KernelSpec(1, 2), False, True),
        (KernelSpec(3), False, True),
        (KernelSpec((1, 1, 1), 1, 0, 2), True, True),
        (KernelSpec(2), False, False),
        (KernelSpec((3, 2, 3)), False, False),
    ],
)
def test_kernel_spec_predicates(spec, pointwise, odd):
    assert spec.is_pointwise is pointwise
    assert spec.is_odd is odd


@pytest.mark.parametrize(
    "args,exc,message",
    [
        ((0,), ValueError, r"^\[KernelSpec\] kernel_size must be positive, got \(0, 0, 0\)"),
        (((3, 0, 3),), ValueError, r"^\[KernelSpec\] kernel_size must be positive, got \(3, 0, 3\)"),
        ((65,), ValueError, r"^\[KernelSpec\] kernel_size must be at most 64 per axis, got \(65, 65, 65\)"),
        ((3, 0), ValueError, r"^\[KernelSpec\] stride must be positive"),
        ((3, 1, -1), ValueError, r"^\[KernelSpec\] padding must be >= 0, got \(-1, -1, -1\)"),
        ((3, 1, 0, 0), ValueError, r"^\[KernelSpec\] dilation must be positive"),
        (((3, 3),), ValueError, r"^\[KernelSpec\] kernel_size must be an int or 3 ints, got \(3, 3\)"),
        (((3, 3, 3.0),), ValueError, r"^\[KernelSpec\] kernel_size must be an int or 3 ints"),
        ((3.0,), TypeError, r"^\[KernelSpec\] kernel_size must be an int or 3 ints, got 3.0"),
        ((True,), TypeError, r"^\[KernelSpec\] kernel_size must be an int or 3 ints, got True"),
        (("3",), ValueError, r"^\[KernelSpec\] kernel_size must be an int or 3 ints, got '3'"),
    ],
)
def test_kernel_spec_rejects_bad_values(args, exc, message):
    with pytest.raises(exc, match=message):
        KernelSpec(*args)


def test_kernel_offsets_errors_name_the_op():
    with pytest.raises(ValueError, match=r"^\[kernel_offsets\] kernel_size must be positive"):
        kernel_offsets(0)
    with pytest.raises(ValueError, match=r"^\[kernel_offsets\] dilation must be positive"):
        kernel_offsets(3, 0)


def test_exports():
    assert lattice.KernelSpec is KernelSpec
    assert lattice.core.kernel_offsets is kernel_offsets
