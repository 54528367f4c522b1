"""Sparse convolutions: forward / target, submanifold, transposed, generative, normalised.

Each op is declared once (``@explainable``): it validates, builds (or fetches) its
relation from the input's coordinate manager, asks the routing layer for a route and
returns the plan; calling the op runs the plan (``dispatch`` of its route),
``lattice.explain`` stops before that.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from lattice.core._checks import DTypeError, dtype_name
from lattice.core.kernel import KernelSpec
from lattice.core.quantized import QuantizedWeight, check_conv_weight, quantize_weight
from lattice.core.relation import KernelRelation, RelationKind
from lattice.core.tensor import SparseTensor
from lattice.ops.features import _channel_vector
from lattice.ops.norms import AFFINE_ACTIVATIONS
from lattice.ops.relations import _target
from lattice.routing import ConvRequest, Route, requested_device, route_conv
from lattice.routing.conv import ConvAffineRequest, route_conv_affine
from lattice.routing.explain import CallPlan, explainable, plan_of
from lattice.routing.registry import dispatch


def mapped_weight(
    weight: mx.array | QuantizedWeight, spec: KernelSpec, op: str
) -> mx.array | QuantizedWeight:
    """Weight as (K, C_in, C_out) from MLX's dense (C_out, Kx, Ky, Kz, C_in) or mapped layout
    (or, for a 1x1x1 kernel, a ``(C_out, C_in)`` matrix: the dense layout without its kernel axes).

    A packed ``QuantizedWeight`` is checked against the kernel and returned as is (the
    packed routes dequantize it).
    """
    if isinstance(weight, QuantizedWeight):
        return check_conv_weight(weight, spec, op)
    if not isinstance(weight, mx.array):
        raise TypeError(
            f"[{op}] weight must be an mx.array or a QuantizedWeight, got {type(weight).__name__}"
        )
    if weight.ndim == 5:
        c_out, kx, ky, kz, c_in = weight.shape
        if (kx, ky, kz) != spec.size:
            raise ValueError(
                f"[{op}] dense weight kernel {(kx, ky, kz)} does not match kernel_size {spec.size}"
            )
        return weight.reshape(c_out, spec.volume, c_in).transpose(1, 2, 0)
    if weight.ndim == 2 and spec.volume == 1:  # pointwise (C_out, C_in): the one offset's matrix
        return weight.T[None]
    if weight.ndim == 3:
        if weight.shape[0] != spec.volume:
            raise ValueError(
                f"[{op}] mapped weight has {weight.shape[0]} offsets, kernel_size {spec.size} has {spec.volume}"
            )
        return weight
    raise ValueError(
        f"[{op}] weight must be dense (C_out, Kx, Ky, Kz, C_in) or mapped (K, C_in, C_out) "
        f"(or (C_out, C_in) for a 1x1x1 kernel), got shape {tuple(weight.shape)}"
    )


def _channels(w) -> tuple[int, int]:
    """(C_in, C_out) of a mapped weight or a packed conv weight."""
    if isinstance(w, QuantizedWeight):
        return w.in_channels, w.out_channels
    return int(w.shape[1]), int(w.shape[2])


def _check_input(x, op: str) -> None:
    if not isinstance(x, SparseTensor):
        raise TypeError(f"[{op}] x must be a SparseTensor, got {type(x).__name__}")


def _conv_request(op, x, w, rel, normalized, device, explicit_target=False) -> ConvRequest:
    spec = rel.spec
    identity = (
        rel.out_key == rel.in_key
        and spec.volume == 1
        and spec.stride == (1, 1, 1)
        and spec.padding == (0, 0, 0)
        and rel.kind in (RelationKind.FORWARD, RelationKind.SUBMANIFOLD, RelationKind.TARGET)
    )
    c_in, c_out = _channels(w)
    return ConvRequest(
        op=op,
        kind=rel.kind.value,
        dtype=dtype_name(x.feats.dtype),
        c_in=c_in,
        c_out=c_out,
        kernel_volume=spec.volume,
        identity_relation=identity,
        n_in=x.run_rows,
        n_out=rel.n_out,
        edges=rel.known_edge_count,
        normalized=normalized,
        device=requested_device(device),
        explicit_target=explicit_target,
        **(w.route_fields if isinstance(w, QuantizedWeight) else {}),
    )


@dataclass(frozen=True)
class ConvPlan:
    """What a conv call will do: its relation, mapped weight and route; ``run`` does it."""

    op: str
    route: Route
    relation: KernelRelation
    weight: mx.array | QuantizedWeight
    x: SparseTensor
    bias: mx.array | None
    normalized: bool = False
    eps: float = 1e-8

    def run(self) -> SparseTensor:
        rel, w, x = self.relation, self.weight, self.x
        feats = x.run_feats
        y = dispatch(self.route, feats, w, rel)
        if self.normalized:
            # conv(1, W^2): the squared weight summed over C_in, applied to a one-channel input of ones.
            ones = mx.ones((feats.shape[0], 1), dtype=mx.float32)
            w2 = mx.sum(mx.square(w.astype(mx.float32)), axis=1, keepdims=True)
            norm = dispatch(self.route, ones, w2, rel)
            y = (y.astype(mx.float32) / mx.sqrt(norm + self.eps)).astype(y.dtype)
        if self.bias is not None:
            y = y + self.bias.astype(y.dtype)
        return self.output(y)

    def on_output(self, t: SparseTensor) -> bool:
        """Whether ``t`` lies on this convolution's output support (its manager and key)."""
        return t.coord_manager is self.x.coord_manager and t.coord_key == self.relation.out_key

    def output(self, feats: mx.array) -> SparseTensor:
        """``feats`` as the tensor this convolution makes: on its output coordinates."""
        rel, manager = self.relation, self.x.coord_manager
        return SparseTensor(
            manager.coords(rel.out_key),
            feats,
            rel.out_key.stride,
            coord_key=rel.out_key,
            coord_manager=manager,
        )


def _plan(op, x: SparseTensor, weight, bias, kind, spec, coordinates, *, eps=None, device=None) -> ConvPlan:
    """The plan of every conv op (``eps`` given: the normalised form)."""
    _check_input(x, op)
    normalized = eps is not None
    rel = _relation(x, kind, spec, coordinates, op, device)  # first: geometry errors before weight errors
    w = mapped_weight(weight, spec, op)
    c_in, c_out = _channels(w)
    if c_in != x.channels:
        raise ValueError(f"[{op}] weight expects {c_in} input channels, x has {x.channels}")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != c_out):
        raise ValueError(f"[{op}] bias must have shape ({c_out},), got {tuple(bias.shape)}")
    route = route_conv(_conv_request(op, x, w, rel, normalized, device, coordinates is not None))
    return ConvPlan(op, route, rel, w, x, bias, normalized, 1e-8 if eps is None else eps)


def _relation(x, kind, spec, coordinates, op, device=None) -> KernelRelation:
    manager = x.coord_manager
    transposed = kind in (RelationKind.TRANSPOSED, RelationKind.GENERATIVE)
    if transposed:
        level = tuple(a // b for a, b in zip(x.stride, spec.stride, strict=True))
    else:
        level = tuple(a * b for a, b in zip(x.stride, spec.stride, strict=True))
    target = _target(manager, coordinates, level, op)
    if kind is RelationKind.FORWARD and target is not None:
        kind = RelationKind.TARGET
    return manager.relation(kind, x.coord_key, spec, target, op=op, device=device)


def _example(kind: str):
    """Arguments for ``lattice explain``: a dense weight of the requested shape (lazy, never evaluated)."""

    def build(x, req):
        k = req.kernel_size
        w = mx.zeros((req.channels[-1], k, k, k, x.channels), dtype=getattr(mx, req.dtype))
        if req.quantize:
            w = quantize_weight(w.astype(mx.float32), bits=req.quantize)
        kwargs = {"kernel_size": k, "device": req.device}
        if kind != "subm":
            kwargs["stride"] = req.stride
        return (x, w), kwargs

    return build


@explainable(example=_example("forward"))
def conv3d(
    x, weight, bias=None, *, kernel_size=3, stride=1, padding=0, dilation=1, coordinates=None, device=None
) -> ConvPlan:
    """Sparse convolution: output on ``unique(floor(coords / stride))`` or on ``coordinates``.

    Edges ``input = output * stride + offset * dilation - padding``; ``weight`` dense
    ``(C_out, Kx, Ky, Kz, C_in)``, mapped ``(K, C_in, C_out)`` or a packed ``QuantizedWeight``.
    """
    spec = KernelSpec(kernel_size, stride, padding, dilation, op="conv3d")
    return _plan("conv3d", x, weight, bias, RelationKind.FORWARD, spec, coordinates, device=device)


@explainable(example=_example("subm"))
def subm_conv3d(x, weight, bias=None, *, kernel_size=3, dilation=1, device=None) -> ConvPlan:
    """Submanifold convolution: output support is the input support (odd kernels)."""
    return _subm("subm_conv3d", x, weight, bias, kernel_size, dilation, device)


@explainable(example=_example("transposed"))
def conv_transpose3d(
    x, weight, bias=None, *, kernel_size=2, stride=2, padding=0, dilation=1, coordinates=None, device=None
) -> ConvPlan:
    """Transposed convolution onto generated support ``unique(s*stride + k*d - p)`` or ``coordinates``."""
    spec = KernelSpec(kernel_size, stride, padding, dilation, op="conv_transpose3d")
    return _plan(
        "conv_transpose3d", x, weight, bias, RelationKind.TRANSPOSED, spec, coordinates, device=device
    )


@explainable(example=_example("transposed"))
def generative_conv_transpose3d(
    x, weight, bias=None, *, kernel_size=2, stride=2, coordinates=None, device=None
) -> ConvPlan:
    """Generative transposed convolution: every coordinate of each input's kernel footprint."""
    return _generative(
        "generative_conv_transpose3d", x, weight, bias, kernel_size, stride, coordinates, device
    )


@explainable(example=_example("subm"))
def normalized_subm_conv3d(
    x, weight, bias=None, *, kernel_size=3, dilation=1, eps=1e-8, device=None
) -> ConvPlan:
    """``conv(X, W) / sqrt(conv(1, W^2) + eps) + b`` on submanifold support."""
    return _subm("normalized_subm_conv3d", x, weight, bias, kernel_size, dilation, device, eps)


@explainable(example=_example("transposed"))
def normalized_conv_transpose3d(
    x,
    weight,
    bias=None,
    *,
    kernel_size=2,
    stride=2,
    padding=0,
    dilation=1,
    coordinates=None,
    eps=1e-8,
    device=None,
) -> ConvPlan:
    """Normalised transposed convolution (see ``normalized_subm_conv3d``)."""
    op = "normalized_conv_transpose3d"
    spec = KernelSpec(kernel_size, stride, padding, dilation, op=op)
    return _plan(op, x, weight, bias, RelationKind.TRANSPOSED, spec, coordinates, device=device, eps=eps)


@explainable(example=_example("transposed"))
def normalized_generative_conv_transpose3d(
    x, weight, bias=None, *, kernel_size=2, stride=2, coordinates=None, eps=1e-8, device=None
) -> ConvPlan:
    """Normalised generative transposed convolution (see ``normalized_subm_conv3d``)."""
    op = "normalized_generative_conv_transpose3d"
    return _generative(op, x, weight, bias, kernel_size, stride, coordinates, device, eps)


def _subm(op, x, weight, bias, kernel_size, dilation, device, eps=None) -> ConvPlan:
    spec = KernelSpec(kernel_size, 1, 0, dilation, op=op)
    return _plan(op, x, weight, bias, RelationKind.SUBMANIFOLD, spec, None, device=device, eps=eps)


def _generative(op, x, weight, bias, kernel_size, stride, coordinates, device, eps=None) -> ConvPlan:
    spec = KernelSpec(kernel_size, stride, 0, 1, op=op)
    return _plan(op, x, weight, bias, RelationKind.GENERATIVE, spec, coordinates, device=device, eps=eps)


# ---- a convolution with the affine map after it ---------------------------------------


def _conv_affine_example(x, req):
    """``lattice explain conv_affine``: a submanifold convolution of the request's kernel
    followed by an eval-mode BatchNorm and a ReLU."""
    k, c_out = req.kernel_size, req.channels[-1]
    w = mx.zeros((c_out, k, k, k, x.channels), dtype=getattr(mx, req.dtype))
    conv = plan_of(subm_conv3d, x, w, kernel_size=k, device=req.device)
    ones = mx.ones((c_out,), dtype=mx.float32)
    return (conv, ones, ones * 0), {"activation": "relu"}


@explainable(example=_conv_affine_example, returns=SparseTensor)
def conv_affine(
    conv: ConvPlan,
    scale: mx.array,
    shift: mx.array,
    *,
    residual: SparseTensor | None = None,
    activation: str | None = None,
    concat: SparseTensor | None = None,
) -> CallPlan:
    """``activation(conv * scale + shift + residual)``: a convolution and the per-channel affine
    map after it (an eval-mode BatchNorm, ``lattice.nn.BatchNorm.affine()``), the residual add
    and the ReLU, as one op; with ``concat``, that tensor's channels after them
    (``cat([..., concat])``: a U-Net decoder's upsampled features and its skip).

    ``conv``: the plan of a conv op, not yet run: a convolution module's ``.plan(x)``, or
    ``lattice.routing.explain.plan_of(lattice.ops.subm_conv3d, x, weight)``. ``scale`` /
    ``shift``: float ``(C_out,)``. ``residual`` (``C_out`` channels) and ``concat`` (any):
    tensors on the convolution's output support (same coordinate manager and key).
    ``activation``: None or ``"relu"``. Where the convolution's kernel takes the epilogue
    (float32 features, no bias, not normalised) it applies the map to its output rows itself
    and writes ``concat``'s columns after them: lattice's native primitive on the CPU
    (``cpu.fused_epilogue``: per output-row block while it is in cache; the two ops' bits),
    the implicit GEMM on CUDA (``cuda.fused_epilogue``: to the float32 sums before they are
    stored; the two ops' up to a multiply-add's rounding). Otherwise the convolution runs,
    then ``lattice.ops.affine``, then the concatenation.
    """
    op = "conv_affine"
    if not isinstance(conv, ConvPlan):
        raise TypeError(
            f"[{op}] conv must be a convolution's plan (a conv module's .plan(x), or "
            "lattice.routing.explain.plan_of(lattice.ops.subm_conv3d, x, weight)), "
            f"got {type(conv).__name__}"
        )
    if activation not in AFFINE_ACTIVATIONS:
        raise ValueError(f"[{op}] activation must be one of {AFFINE_ACTIVATIONS}, got {activation!r}")
    c_out = _channels(conv.weight)[1]
    vectors = [
        _channel_vector(v, name, c_out, op, required=True) for name, v in (("scale", scale), ("shift", shift))
    ]
    for name, v in zip(("scale", "shift"), vectors, strict=True):
        if not mx.issubdtype(v.dtype, mx.floating):
            raise DTypeError(f"[{op}] {name} must be floating point, got {dtype_name(v.dtype)}")
    r = _on_output(conv, residual, "residual", c_out, op)
    cc = _on_output(conv, concat, "concat", None, op)
    req = ConvAffineRequest(
        op,
        conv.route.name,
        dtype_name(conv.x.feats.dtype),
        c_out,
        bias=conv.bias is not None,
        normalized=conv.normalized,
        residual=r is not None,
        activation=activation or "none",
        concat=0 if cc is None else int(cc.shape[1]),
    )
    route = route_conv_affine(req)
    relu = activation == "relu"
    return CallPlan(route, lambda: conv.output(dispatch(route, conv, *vectors, r, relu, cc)))


def _on_output(conv: ConvPlan, t, name: str, channels: int | None, op: str) -> mx.array | None:
    """The rows of ``t`` (None: None), a tensor on the convolution's output support (with
    ``channels`` channels where given)."""
    if t is None:
        return None
    if not isinstance(t, SparseTensor):
        raise TypeError(f"[{op}] {name} must be a SparseTensor, got {type(t).__name__}")
    rel = conv.relation
    if not conv.on_output(t):
        raise ValueError(
            f"[{op}] {name} must lie on the convolution's output support (its coordinate manager and "
            f"key {rel.out_key}), got key {t.coord_key}"
        )
    feats = t.run_feats
    want = (rel.n_out, feats.shape[1] if channels is None else channels)
    if feats.shape != want:
        raise ValueError(f"[{op}] {name} must have shape {want}, got {tuple(feats.shape)}")
    return feats
