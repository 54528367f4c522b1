"""The base of the kernel modules (convolutions and local pooling): a constructor declared
once as data, and the kernel geometry it stores.

A conv module is a relation kind (its geometry keywords, its op, its call) times a weight
store (float, normalised, packed); written out, every combination repeats the same
signature and body. Here a class lists its constructor's arguments instead — positional
``_positional`` names, then the keyword-only ``_keywords()`` (name -> default) — and
:class:`DeclaredModule` gives it an ``__init__`` with exactly that signature, which binds
a call like a written one (the same ``TypeError`` for a wrong argument, defaults filled
in), runs ``mlx.nn.Module.__init__`` and hands the arguments to ``_setup``.
"""

from __future__ import annotations

import inspect

import mlx.nn as nn

from lattice.core.kernel import KernelGeometry, KernelSpec

# how the generated signatures annotate the arguments (as written annotations read under
# ``from __future__ import annotations``)
_ANNOTATIONS = {
    "in_channels": "int",
    "out_channels": "int",
    "mode": "PoolMode | str",
    "kernel_size": "IntOrTriple",
    "stride": "IntOrTriple",
    "padding": "IntOrTriple",
    "dilation": "IntOrTriple",
    "bias": "bool",
    "eps": "float",
    "group_size": "int | None",
    "bits": "int",
}


def _signature(cls: type) -> inspect.Signature:
    P = inspect.Parameter

    def parameter(name: str, kind, default=P.empty) -> inspect.Parameter:
        return P(name, kind, default=default, annotation=_ANNOTATIONS.get(name, P.empty))

    return inspect.Signature(
        [
            P("self", P.POSITIONAL_OR_KEYWORD),
            *(parameter(n, P.POSITIONAL_OR_KEYWORD) for n in cls._positional),
            *(parameter(n, P.KEYWORD_ONLY, d) for n, d in cls._keywords().items()),
        ],
        return_annotation="None",
    )


def _quoted(names: list[str]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"


def _call_error(positional: tuple[str, ...], args: tuple, kwargs: dict, error: TypeError) -> str:
    """What Python says of a written ``__init__`` called so (``Signature.bind`` words it otherwise)."""
    given = 1 + len(args)
    if given > 1 + len(positional):
        s = "" if len(positional) == 0 else "s"
        return f"takes {1 + len(positional)} positional argument{s} but {given} {'was' if given == 1 else 'were'} given"
    missing = [n for n in positional[len(args) :] if n not in kwargs]
    if missing:
        s = "" if len(missing) == 1 else "s"
        return f"missing {len(missing)} required positional argument{s}: {_quoted(missing)}"
    return str(error) if str(error).startswith("got ") else f"got {error}"


def _declared_init(cls: type):
    signature = _signature(cls)
    positional = cls._positional

    def __init__(self, *args, **kwargs) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError as e:
            raise TypeError(
                f"{type(self).__name__}.__init__() {_call_error(positional, args, kwargs, e)}"
            ) from None
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        del arguments["self"]
        nn.Module.__init__(self)
        self._setup(**arguments)

    __init__.__signature__ = signature
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    __init__.declared = True
    return __init__


class DeclaredModule(nn.Module):
    """An ``mlx.nn.Module`` whose ``__init__`` is generated from ``_positional`` and
    ``_keywords()`` for each subclass. A subclass that writes its own ``__init__`` keeps it
    (and so do the classes below it)."""

    _positional: tuple[str, ...] = ()

    @classmethod
    def _keywords(cls) -> dict[str, object]:
        return {}

    def _setup(self, **arguments) -> None:
        """Checks and stores the bound constructor arguments."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" not in cls.__dict__ and getattr(cls.__init__, "declared", False):
            cls.__init__ = _declared_init(cls)


DeclaredModule.__init__ = _declared_init(DeclaredModule)


def kernel_spec(geometry: dict, op: str, *, odd: bool = False) -> KernelSpec:
    """The checked KernelSpec of geometry keywords (``kernel_size`` and any of ``stride``,
    ``padding``, ``dilation``; the others take KernelSpec's defaults)."""
    spec = KernelSpec(
        geometry["kernel_size"],
        geometry.get("stride", 1),
        geometry.get("padding", 0),
        geometry.get("dilation", 1),
        op=op,
    )
    if odd and not spec.is_odd:
        raise ValueError(f"[{op}] kernel_size must be odd on every axis, got {spec.size}")
    return spec


class KernelModule(KernelGeometry, DeclaredModule):
    """A module over a kernel relation: its keyword-only ``_geometry`` (name -> default, in
    signature order) becomes a checked ``spec`` (a frozen value, kept out of the parameter
    tree), handed back to the op as the same keywords."""

    _geometry: dict[str, object] = {}
    _odd = False  # the kernel must be odd on every axis (submanifold relations)

    @classmethod
    def _keywords(cls) -> dict[str, object]:
        return dict(cls._geometry)

    def _setup(self, **geometry) -> None:
        self.spec = kernel_spec(geometry, type(self).__name__, odd=self._odd)

    def _geometry_kwargs(self) -> dict:
        return {k: getattr(self, k) for k in self._geometry}

    def _geometry_repr(self) -> list[str]:
        return [f"{k}={v}" for k, v in self._geometry_kwargs().items()]
