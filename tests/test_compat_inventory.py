"""Every name of the documented mlx-lattice 0.6.3 API, checked against COMPAT.md's inventory.

The test reads ``../shared/COMPAT.md`` (skipped cleanly when it is absent) and, for each
documented module and name: imports it from the documented ``mlx_lattice`` module and
compares the parameter list — names, kinds (positional / keyword-only) and defaults —
with the inventory's signature; classes also by bases, dataclass field order, fields and
members. Names in ``mlx_lattice._missing`` must raise its clear error instead, and the
lists there must hold only what is really missing (a listed name that lattice or
mlx_lattice now provides fails the test: drop it from the list).

Signature policy: documented code must run unchanged. lattice may add parameters with
defaults after the documented ones (``device=``, ``return_index=``, ...) and may give a
documented required parameter a default; keyword-only parameters match by name in any
order. Anything else — a renamed, reordered, re-kinded parameter or a different default —
fails. Private (underscored) documented fields and private bases are not checked.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import re
import typing
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import lattice
import lattice.core
import lattice.nn
import lattice.ops
from mlx_lattice import _missing
from mlx_lattice._missing import NotProvidedError

COMPAT = Path(__file__).resolve().parents[1] / ".." / "shared" / "COMPAT.md"
EMPTY = inspect.Parameter.empty
P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)


# ---- the inventory -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    kind: inspect._ParameterKind
    default: object = EMPTY


@dataclasses.dataclass(frozen=True)
class Entry:
    module: str  # full documented module name
    kind: str  # 'reexport' | 'type' | 'class' | 'function'
    name: str
    params: tuple[Param, ...] | None = None  # function signature / class __init__ (None: not given)
    bases: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    alias: str | None = None  # the right-hand side of a type alias

    @property
    def id(self) -> str:
        return f"{self.module}.{self.name}"


def parse_params(text: str) -> tuple[Param, ...]:
    args = ast.parse(f"def _f({text}): pass").body[0].args
    out: list[Param] = []
    positional = [(a, P.POSITIONAL_ONLY) for a in args.posonlyargs] + [
        (a, P.POSITIONAL_OR_KEYWORD) for a in args.args
    ]
    defaults = [EMPTY] * (len(positional) - len(args.defaults)) + [ast.literal_eval(d) for d in args.defaults]
    for (arg, kind), default in zip(positional, defaults, strict=True):
        out.append(Param(arg.arg, kind, default))
    if args.vararg:
        out.append(Param(args.vararg.arg, P.VAR_POSITIONAL))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append(Param(arg.arg, P.KEYWORD_ONLY, EMPTY if default is None else ast.literal_eval(default)))
    if args.kwarg:
        out.append(Param(args.kwarg.arg, P.VAR_KEYWORD))
    return tuple(out)


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip()) if text else ()


_CLASS = re.compile(
    r"^class (\w+)\(([^)]*)\)(?: __init__\((.*?)\)(?=;|$))?(?:; fields: ([^;]*))?(?:; members: (.*))?$"
)
_FUNCTION = re.compile(r"^(\w+)\((.*)\)$")
_TYPE = re.compile(r"^type (\w+) = (.*)$")


def parse_inventory(text: str) -> list[Entry]:
    entries: list[Entry] = []
    module = None
    for line in text.split("## Inventory", 1)[1].splitlines():
        heading = re.match(r"^### `([\w.]+)`", line)
        if heading:
            module = heading.group(1)
            continue
        if module is None or not line.startswith("- "):
            continue
        body = line[2:].strip()
        if body.startswith("re-exports:"):
            entries += [Entry(module, "reexport", n) for n in _names(body.split(":", 1)[1])]
            continue
        body = body.strip("`")
        if m := _TYPE.match(body):
            entries.append(Entry(module, "type", m.group(1), alias=m.group(2)))
        elif m := _CLASS.match(body):
            name, bases, init, fields, members = m.groups()
            params = parse_params(init) if init is not None else None
            entries.append(
                Entry(module, "class", name, params, _names(bases), _names(fields), _names(members))
            )
        elif m := _FUNCTION.match(body):
            entries.append(Entry(module, "function", m.group(1), parse_params(m.group(2))))
        else:
            raise ValueError(f"COMPAT.md: cannot read inventory line {line!r}")
    return entries


ENTRIES: list[Entry] = parse_inventory(COMPAT.read_text()) if COMPAT.exists() else []
MODULES: list[str] = list(dict.fromkeys(e.module for e in ENTRIES))

pytestmark = pytest.mark.skipif(not COMPAT.exists(), reason=f"{COMPAT} is absent")


# ---- comparing one entry ------------------------------------------------------------------------


def _sample_tensor():
    return lattice.SparseTensor(np.array([[0, 0, 0, 0], [0, 1, 0, 0]], np.int32), np.ones((2, 3), np.float32))


# Instances for classes whose documented fields are instance attributes.
SAMPLES = {"SparseTensor": _sample_tensor}


def _same_default(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_default(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def compare_signature(documented: tuple[Param, ...], sig: inspect.Signature) -> tuple[list[str], list[str]]:
    """(problems, extensions) of an actual signature against the documented parameters."""
    problems: list[str] = []
    extensions: list[str] = []
    actual = list(sig.parameters.values())
    doc_pos = [p for p in documented if p.kind in POSITIONAL]
    act_pos = [p for p in actual if p.kind in POSITIONAL]
    doc_kw = {p.name: p for p in documented if p.kind is P.KEYWORD_ONLY}
    act_kw = {p.name: p for p in actual if p.kind is P.KEYWORD_ONLY}

    def default(d: Param, a: inspect.Parameter) -> None:
        if d.default is EMPTY and a.default is not EMPTY:
            extensions.append(f"{a.name}={a.default!r} (documented required)")
        elif d.default is not EMPTY and a.default is EMPTY:
            problems.append(f"{d.name}: no default, documented {d.name}={d.default!r}")
        elif d.default is not EMPTY and not _same_default(d.default, a.default):
            problems.append(f"{d.name}: default {a.default!r}, documented {d.default!r}")

    for i, d in enumerate(doc_pos):
        if i >= len(act_pos):
            where = " (keyword-only here)" if d.name in act_kw else ""
            problems.append(f"positional parameter {i} {d.name!r} is missing{where}")
            continue
        a = act_pos[i]
        if a.name != d.name:
            problems.append(f"positional parameter {i} is {a.name!r}, documented {d.name!r}")
        elif a.kind is not d.kind:
            problems.append(f"{d.name}: {a.kind.description}, documented {d.kind.description}")
        else:
            default(d, a)
    for a in act_pos[len(doc_pos) :]:
        if a.default is EMPTY:
            problems.append(f"extra required positional parameter {a.name!r}")
        else:
            extensions.append(f"{a.name}={a.default!r}")
    for name, d in doc_kw.items():
        a = act_kw.get(name)
        if a is None:
            where = " (positional here)" if any(p.name == name for p in act_pos) else ""
            problems.append(f"keyword-only parameter {name!r} is missing{where}")
        else:
            default(d, a)
    for name, a in act_kw.items():
        if name not in doc_kw:
            if a.default is EMPTY:
                problems.append(f"extra required keyword-only parameter {name!r}")
            else:
                extensions.append(f"{name}={a.default!r}")
    for a in actual:
        if a.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD) and not any(d.kind is a.kind for d in documented):
            extensions.append(str(a))
    return problems, extensions


def has_member(cls: type, name: str) -> bool:
    """``name`` is a field or member of ``cls`` defined by lattice / mlx_lattice (a member only
    inherited from an ``mlx.nn`` base does not count: it is mlx's behaviour, not the documented one)."""
    if dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}:
        return True
    for klass in cls.__mro__:
        if name in vars(klass):
            return not klass.__module__.startswith("mlx.")
    sample = SAMPLES.get(cls.__name__)
    return sample is not None and name in vars(sample())


def _base(module, name: str):
    if name.startswith("mxnn."):
        import mlx.nn

        return getattr(mlx.nn, name.removeprefix("mxnn."))
    return getattr(module, name)


def _alias_value(obj):
    return getattr(obj, "__value__", obj)  # a PEP 695 TypeAliasType or a plain alias


@dataclasses.dataclass
class Outcome:
    status: str  # 'direct' | 'adapted' | 'module' | 'missing' | 'out of scope' | 'unresolved'
    problems: list[str] = dataclasses.field(default_factory=list)
    extensions: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)  # listed DIFFERS / PARTIAL / LIMITED


def _status(entry: Entry, obj) -> str:
    if inspect.ismodule(obj):
        return "module"
    owner = getattr(obj, "__module__", None)
    if isinstance(owner, str) and owner.split(".")[0] == "lattice":
        return "direct"
    if obj is getattr(lattice, entry.name, object()):
        return "direct"
    return "adapted"


def _expect_not_provided(entry: Entry, module, fragment: str, out: Outcome) -> None:
    if entry.name in vars(module):
        out.problems.append(
            f"listed in mlx_lattice._missing but defined in {entry.module}: drop it from the list"
        )
        return
    for access in ("attribute", "from-import"):
        try:
            if access == "attribute":
                getattr(module, entry.name)
            else:
                exec(f"from {entry.module} import {entry.name}", {})
        except NotProvidedError as e:
            if f"{entry.id} {fragment}" not in str(e) or _missing.ISSUE not in str(e):
                out.problems.append(f"{access}: unclear message {str(e)!r}")
        except Exception as e:  # noqa: BLE001
            out.problems.append(f"{access}: {type(e).__name__} {e}, not NotProvidedError")
        else:
            out.problems.append(f"{access}: resolves, yet listed as not provided")


@functools.cache
def check(entry: Entry) -> Outcome:
    module = importlib.import_module(entry.module)
    if entry.name in _missing.missing_in(entry.module):
        out = Outcome("missing")
        _expect_not_provided(entry, module, "is not provided yet by lattice", out)
        return out
    if entry.name in _missing.out_of_scope_in(entry.module):
        out = Outcome("out of scope")
        _expect_not_provided(entry, module, "is out of scope", out)
        return out
    try:
        obj = getattr(module, entry.name)
    except Exception as e:  # noqa: BLE001
        return Outcome(
            "unresolved", [f"does not import ({type(e).__name__}: {e}) and is not listed as missing"]
        )
    out = Outcome(_status(entry, obj))
    if entry.kind == "type":
        expected = eval(
            entry.alias, {"__builtins__": {}, "Literal": typing.Literal, "mx": mx, "tuple": tuple}
        )
        if _alias_value(obj) != expected:
            out.problems.append(f"alias is {_alias_value(obj)!r}, documented {entry.alias}")
    elif entry.kind == "function":
        if not callable(obj) or inspect.isclass(obj):
            out.problems.append(f"is {obj!r}, documented a function")
        else:
            problems, out.extensions = compare_signature(entry.params, inspect.signature(obj))
            out.problems += problems
            limited = _missing.LIMITED.get((entry.module.removeprefix("mlx_lattice."), entry.name))
            if limited:
                out.notes.append(f"limited: {limited}")
    elif entry.kind == "class":
        _check_class(entry, module, obj, out)
    return out


def _check_class(entry: Entry, module, cls, out: Outcome) -> None:
    if not inspect.isclass(cls):
        out.problems.append(f"is {cls!r}, documented a class")
        return
    for base in entry.bases:
        if base.startswith("_"):
            continue  # a private base of the documented implementation
        if not issubclass(cls, _base(module, base)):
            out.problems.append(f"is not a subclass of {base}")
    structure: list[str] = []
    if entry.params is not None:
        structure, out.extensions = compare_signature(entry.params, inspect.signature(cls))
    elif entry.fields and dataclasses.is_dataclass(cls):
        init_fields = [f.name for f in dataclasses.fields(cls) if f.init]
        public = [f for f in entry.fields if not f.startswith("_")]
        if init_fields[: len(public)] != public:
            structure = [f"dataclass fields {init_fields}, documented {public}"]
    if entry.name in _missing.DIFFERS:
        if structure:
            out.notes.append(f"differs: {_missing.DIFFERS[entry.name]}")
        else:
            out.problems.append("constructor now matches the documentation: drop it from _missing.DIFFERS")
    else:
        out.problems += structure
    partial = _missing.PARTIAL.get(entry.name, {})
    for member in (*entry.fields, *entry.members):
        if member.startswith("_"):
            continue  # private state of the documented implementation
        present = has_member(cls, member)
        if member in partial:
            if present:
                out.problems.append(f"{member} is now present: drop it from _missing.PARTIAL[{entry.name!r}]")
            else:
                out.notes.append(f"lacks {member}")
        elif not present:
            out.problems.append(f"lacks documented member {member!r} (not in _missing.PARTIAL)")


# ---- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.id}:{e.kind}")
def test_documented_name(entry):
    outcome = check(entry)
    assert not outcome.problems, f"{entry.id}: " + "; ".join(outcome.problems)


@pytest.mark.parametrize("module", MODULES)
def test_documented_module_imports(module):
    importlib.import_module(module)


def test_a_name_is_one_object_in_every_documented_module():
    seen: dict[str, tuple[str, object]] = {}
    for entry in ENTRIES:
        if check(entry).status in ("missing", "out of scope", "unresolved"):
            continue
        obj = getattr(importlib.import_module(entry.module), entry.name)
        first = seen.setdefault(entry.name, (entry.module, obj))
        assert first[1] is obj, f"{entry.name}: {entry.module}'s differs from {first[0]}'s"


def _documented(module_short: str, name: str) -> bool:
    full = "mlx_lattice" + ("." + module_short if module_short else "")
    return any(e.module == full and e.name == name for e in ENTRIES)


def _lattice_public() -> set[str]:
    return (
        set(lattice.__all__) | set(lattice.core.__all__) | set(lattice.ops.__all__) | set(lattice.nn.__all__)
    )


def test_missing_list_holds_only_missing_names():
    public = _lattice_public()
    for name, (group, modules) in _missing.MISSING.items():
        assert group in _missing.GROUPS, name
        assert modules, name
        for m in modules:
            assert _documented(m, name), f"_missing.MISSING[{name!r}]: not documented in mlx_lattice.{m}"
        assert name not in public, f"lattice now provides {name}: re-export it and drop it from the list"
    for name, (scope, modules) in _missing.OUT_OF_SCOPE.items():
        assert scope in _missing.SCOPES, name
        for m in modules:
            assert _documented(m, name), f"_missing.OUT_OF_SCOPE[{name!r}]: not documented in mlx_lattice.{m}"


def test_partial_differs_limited_name_documented_things():
    classes = {e.name: e for e in ENTRIES if e.kind == "class"}
    for cls, members in _missing.PARTIAL.items():
        assert cls in classes, cls
        assert set(members) <= set(classes[cls].fields) | set(classes[cls].members), cls
    for cls in _missing.DIFFERS:
        assert cls in classes, cls
    functions = {(e.module.removeprefix("mlx_lattice."), e.name) for e in ENTRIES if e.kind == "function"}
    for key in _missing.LIMITED:
        assert key in functions, key


def test_out_of_scope_modules_raise_on_import():
    for short in _missing.OUT_OF_SCOPE_MODULES:
        with pytest.raises(NotProvidedError, match=f"mlx_lattice.{re.escape(short)} is out of scope"):
            importlib.import_module(f"mlx_lattice.{short}")


# ---- the counts ---------------------------------------------------------------------------------

COLUMNS = ("direct", "adapted", "module", "missing", "out of scope")


def counts() -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {m: dict.fromkeys(COLUMNS, 0) for m in MODULES}
    for entry in ENTRIES:
        status = check(entry).status
        if status in COLUMNS:
            table[entry.module][status] += 1
    return table


def render_counts() -> str:
    """The per-module counts as a Markdown table (docs/compat.md shows it)."""
    table = counts()
    head = "| module | " + " | ".join(COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    total = dict.fromkeys(COLUMNS, 0)
    for module, row in table.items():
        lines.append(f"| `{module}` | " + " | ".join(str(row[c]) for c in COLUMNS) + " |")
        for c in COLUMNS:
            total[c] += row[c]
    lines.append("| **all** | " + " | ".join(f"**{total[c]}**" for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def test_counts_per_module(record_property):
    table = counts()
    assert sum(sum(row.values()) for row in table.values()) == len(ENTRIES)  # nothing unresolved
    for module, row in table.items():
        record_property(module, row)
    print("\n" + render_counts())  # shown with -s or -rP
    notes = [
        f"{e.id}: {n}"
        for e in ENTRIES
        for n in check(e).notes + [f"extension {x}" for x in check(e).extensions]
    ]
    print("\n".join(notes))
