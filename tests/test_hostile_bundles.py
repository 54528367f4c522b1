"""Hostile model bundles (issue 22): every reproducer of the fuzz campaign through the installed
``lattice model-run BUNDLE SCAN -o out.ply``, in a subprocess limited to 2 GiB of address
space and 30 s, must exit 1 with exactly one ``lattice: error: <bundle>...`` line naming the
key or tensor, no traceback and no output file. Then ``load_model``'s own guarantees: the
expected tensors are computed exactly, nothing is built before the header is checked, a
stored-packed bundle is never re-quantized, and the checksum policy.
"""

from __future__ import annotations

import json
import math
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from cli_helpers import LATTICE, address_space_limit, data_file
from mlx.utils import tree_flatten

from lattice.models import (
    BundleError,
    MinkUNet,
    Quantization,
    ResNetConfig,
    SparseResNet,
    UNetConfig,
    build_model,
    load_model,
    read_model_json,
)
from lattice.models.limits import CONFIG_BOUNDS, MAX_VALUES, check_config, check_depth
from lattice.models.params import parameter_specs
from lattice.models.weightfile import read_header, sha256_of
from lattice.nn import QuantizedSubmConv3d, SubmConv3d, from_packed, quantize

SHIPPED = Path(__file__).resolve().parents[1] / "examples" / "models" / "minkunet14-semantickitti"
SCAN = "semantickitti/seq00_000000.bin"
# set the limit in the child itself, then exec the command (no preexec_fn in a threaded parent)
_LIMITED = (
    "import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_AS, (n, n)); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


def model_run(bundle: Path, out: Path, *options: str) -> subprocess.CompletedProcess:
    """``lattice model-run bundle SCAN -o out`` under RLIMIT_AS (``address_space_limit``: 2 GiB
    on a CPU machine) and a 30 s timeout."""
    cmd = [*LATTICE, "model-run", str(bundle), str(data_file(SCAN)), "-o", str(out), *options]
    limit = str(address_space_limit())
    return subprocess.run(
        [sys.executable, "-c", _LIMITED, limit, *cmd], capture_output=True, text=True, timeout=30
    )


def assert_refused(result: subprocess.CompletedProcess, bundle: Path, out: Path, *needles: str) -> None:
    """Exit 1, one stderr line ``lattice: error: <bundle>...`` holding every needle, nothing written."""
    lines = result.stderr.splitlines()
    assert result.returncode == 1, result.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"lattice: error: {bundle}"), lines[:5]
    assert "Traceback" not in result.stderr and result.stdout == ""
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not out.exists()


@pytest.fixture(scope="module")
def float_bundle(tmp_path_factory) -> Path:
    """A float32 MinkUNet14 bundle at width 8 with the shipped bundle's preprocessing and
    classes (the shipped one stores packed int4 weights; these tests damage float ones)."""
    from lattice.models import minkunet, save_model

    shipped = load_model(SHIPPED)
    mx.random.seed(0)
    model = minkunet(14, len(shipped.preprocessing.features), len(shipped.outputs.classes), width=8)
    path = tmp_path_factory.mktemp("float") / "bundle"
    save_model(model, path, preprocessing=shipped.preprocessing, outputs=shipped.outputs)
    return path


@pytest.fixture
def bundle(tmp_path, float_bundle) -> Path:
    """A copy of the float32 bundle (model.json + weights.safetensors) to damage."""
    dst = tmp_path / "bundle"
    dst.mkdir()
    for name in ("model.json", "weights.safetensors"):
        shutil.copy(float_bundle / name, dst / name)
    return dst


class Raw(str):
    """model.json text to write as it is (what json.dumps cannot write: bombs, 5000 digits)."""


def edit_json(bundle: Path, edit) -> None:
    """``edit(doc)`` mutates model.json, or returns the :class:`Raw` text to write instead."""
    doc = json.loads((bundle / "model.json").read_text())
    text = edit(doc)
    (bundle / "model.json").write_text(text if isinstance(text, Raw) else json.dumps(doc))


def config(**values):
    return lambda d: d["architecture"]["config"].update(values)


def quantized(bits=8, **values):
    return lambda d: (d["architecture"]["config"].update(values), d.update(quantization={"bits": bits}))


def with_raw(key: str, raw: str):
    """model.json with ``key`` (top level) set to raw JSON text (a bomb json.dumps cannot write)."""
    return lambda d: Raw(json.dumps({**d, key: "RAW"}).replace('"RAW"', raw))


def _raw_config(key: str, raw: str):
    def edit(d):
        d["architecture"]["config"][key] = "RAW"
        return Raw(json.dumps(d).replace('"RAW"', raw))

    return edit


BOMB = "[" * 100_000 + "]" * 100_000
WIDEST = dict(
    stem_channels=4096,
    encoder_channels=[4096] * 8,
    encoder_blocks=[64] * 8,
    decoder_channels=[4096] * 8,
    decoder_blocks=[64] * 8,
)
KEY = "architecture.config."
JSON_CASES = [
    # the fuzz campaign's reproducers
    pytest.param(quantized(stem_channels=10**9), [f"{KEY}stem_channels", "1..4096"], id="segfault-int8-width"),
    pytest.param(quantized(stem_channels=1e9), [f"{KEY}stem_channels", "1000000000.0"], id="int8-width-float"),
    pytest.param(config(encoder_blocks=[10**9, 1, 1, 1]), [f"{KEY}encoder_blocks", "1..64"], id="huge-blocks"),
    pytest.param(config(stem_channels=10**9), [f"{KEY}stem_channels"], id="huge-width-float-weights"),
    pytest.param(config(num_classes=10**9), [f"{KEY}num_classes"], id="huge-num-classes"),
    pytest.param(config(num_classes=1e9), [f"{KEY}num_classes"], id="num-classes-1e9"),
    # every kind of bad value
    pytest.param(config(stem_channels=-8), [f"{KEY}stem_channels", "got -8"], id="negative"),
    pytest.param(config(in_channels=0), [f"{KEY}in_channels", "got 0"], id="zero"),
    pytest.param(config(stem_kernel=True), [f"{KEY}stem_kernel", "got True"], id="bool"),
    pytest.param(config(in_channels=5.0), [f"{KEY}in_channels", "got 5.0"], id="float"),
    pytest.param(config(num_classes="19"), [f"{KEY}num_classes", "got '19'"], id="string"),
    pytest.param(config(stem_channels=None), [f"{KEY}stem_channels", "got None"], id="null"),
    pytest.param(config(stem_kernel=4), [f"{KEY}stem_kernel", "an odd integer in 1..9"], id="even-kernel"),
    pytest.param(config(stem_kernel=11), [f"{KEY}stem_kernel"], id="kernel-too-large"),
    pytest.param(config(encoder_channels=[8, 16, -32, 64]), [f"{KEY}encoder_channels"], id="negative-in-list"),
    pytest.param(config(decoder_blocks=[1, 1, 1, 0]), [f"{KEY}decoder_blocks", "got [1, 1, 1, 0]"], id="zero-blocks"),
    pytest.param(config(encoder_blocks=[1] * 9), [f"{KEY}encoder_blocks", "1..8 entries"], id="too-many-levels"),
    pytest.param(config(encoder_blocks=[]), [f"{KEY}encoder_blocks"], id="no-levels"),
    pytest.param(config(encoder_channels=8), [f"{KEY}encoder_channels"], id="scalar-for-list"),
    pytest.param(config(**WIDEST), ["architecture.config implies", "parameter values"], id="over-the-value-cap"),
    pytest.param(lambda d: d["architecture"].update(config=[1]), ["architecture.config must be a JSON object"], id="config-list"),
    pytest.param(lambda d: d["architecture"].update(name=["minkunet"]), ["unknown architecture"], id="name-list"),
    pytest.param(lambda d: d["architecture"]["config"].pop("in_channels"), [f"{KEY[:-1]} is missing"], id="missing-key"),
    # quantization parameters
    pytest.param(lambda d: d.update(quantization={"bits": 8.0}), ["quantization.bits must be 4 or 8"], id="bits-float"),
    pytest.param(lambda d: d.update(quantization={"bits": 3}), ["quantization.bits"], id="bits-3"),
    pytest.param(lambda d: d.update(quantization={"bits": 4, "group_size": 48}), ["quantization.group_size"], id="group-48"),
    pytest.param(lambda d: d.update(quantization={"bits": 4, "group_size": True}), ["quantization.group_size"], id="group-bool"),
    pytest.param(lambda d: d.update(quantization={"bits": 8, "x": 1}), ["quantization has unknown keys"], id="quant-key"),
    # a packed bundle's model.json over float weights: the header check finds the missing scales
    pytest.param(lambda d: d.update(quantization={"bits": 8}), ["missing tensor 'stem.conv.scales'"], id="int8-over-floats"),
    # JSON bombs and oversized values
    pytest.param(with_raw("metadata", BOMB), ["model.json: not valid JSON: nested too deeply"], id="nested-bomb"),
    pytest.param(_raw_config("stem_channels", BOMB), ["nested too deeply"], id="nested-bomb-in-config"),
    pytest.param(with_raw("metadata", "[" * 200 + "]" * 200), ["metadata", "nested more than 64 levels"], id="deep"),
    pytest.param(_raw_config("stem_channels", "1" + "0" * 5000), ["not valid JSON", "digits"], id="5000-digits"),
    pytest.param(lambda d: d.update(metadata={"pad": "x" * (17 << 20)}), ["over the 16777216-byte limit"], id="17-MiB"),
    # checksums
    pytest.param(lambda d: d["weights"].update(sha256="0" * 64), ["weights.safetensors: its sha256 differs"], id="wrong-sha256"),
    pytest.param(lambda d: d["weights"].update(sha256="abc"), ["weights.sha256 must be 64 hexadecimal"], id="bad-sha256"),
]  # fmt: skip


@pytest.mark.parametrize("edit, needles", JSON_CASES)
def test_hostile_model_json(bundle, tmp_path, edit, needles):
    edit_json(bundle, edit)
    out = tmp_path / "out.ply"
    assert_refused(model_run(bundle, out), bundle, out, *needles)


# ---- the weight file ---------------------------------------------------------------------


def _split(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _write(path: Path, header: dict | str | bytes, data: bytes) -> None:
    text = (
        header
        if isinstance(header, bytes)
        else (header if isinstance(header, str) else json.dumps(header)).encode()
    )
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def header_edit(fn):
    """Rewrite the header dict in place with ``fn`` (the tensor bytes stay as they are)."""

    def edit(path: Path) -> None:
        header, data = _split(path)
        fn(header)
        _write(path, header, data)

    return edit


def raw_edit(fn):
    return lambda path: path.write_bytes(fn(path.read_bytes()))


def mlx_edit(fn):
    """Rewrite the file with MLX's own writer after ``fn`` edits the tensors (a real writer's file)."""

    def edit(path: Path) -> None:
        tensors = mx.load(str(path))
        fn(tensors)
        mx.save_safetensors(str(path), tensors)

    return edit


def _duplicate(path: Path) -> None:
    header, data = _split(path)
    text = json.dumps(header)
    _write(path, text[:-1] + ', "head.bias": ' + json.dumps(header["head.bias"]) + "}", data)


def _sparse_over_cap(path: Path) -> None:
    with open(path, "r+b") as f:  # a 17 MiB header length in a 20 MiB file that is mostly a hole
        f.write((17 << 20).to_bytes(8, "little"))
        f.truncate(20 << 20)


def _share(header: dict) -> None:
    header["stem.norm.bias"]["data_offsets"] = header["stem.norm.weight"]["data_offsets"]


def _past_the_end(header: dict) -> None:
    begin, end = header["head.bias"]["data_offsets"]
    header["head.bias"]["data_offsets"] = [begin + 10**9, end + 10**9]


FILE = "weights.safetensors"
WEIGHT_CASES = [
    pytest.param(raw_edit(lambda b: (2**63).to_bytes(8, "little") + b[8:]), ["header length 9223372036854775808 runs past"], id="length-2**63"),
    pytest.param(raw_edit(lambda b: len(b).to_bytes(8, "little") + b[8:]), ["runs past the end of the file"], id="length-past-the-file"),
    pytest.param(_sparse_over_cap, ["over the 16777216-byte limit"], id="length-over-the-cap"),
    pytest.param(raw_edit(lambda b: b[:5]), ["5 bytes, too short"], id="5-bytes"),
    pytest.param(raw_edit(lambda b: b[: len(b) // 2]), ["lie outside the file's"], id="truncated"),
    pytest.param(header_edit(_past_the_end), ["tensor 'head.bias' data_offsets", "outside the file"], id="offsets-past-the-file"),
    pytest.param(header_edit(lambda h: h["head.bias"].update(data_offsets=[0, 4])), ["'head.bias' has 4 data bytes", "needs 76"], id="offsets-lie-about-size"),
    pytest.param(header_edit(_share), ["share data bytes"], id="overlapping-tensors"),
    pytest.param(header_edit(lambda h: h["head.bias"].update(dtype="Q4")), ["'head.bias' has unknown dtype 'Q4'"], id="unknown-dtype"),
    pytest.param(header_edit(lambda h: h["head.bias"].update(shape=[-19])), ["'head.bias' shape must be"], id="negative-shape"),
    pytest.param(header_edit(lambda h: h["head.bias"].update(shape=[True] * 19)), ["'head.bias' shape must be"], id="bool-shape"),
    pytest.param(header_edit(lambda h: h["head.bias"].pop("dtype")), ["'head.bias' must have exactly the keys"], id="entry-keys"),
    pytest.param(header_edit(lambda h: h.update(__metadata__={"a": [1]})), ["__metadata__ must map names to strings"], id="metadata"),
    pytest.param(lambda p: _write(p, "[1, 2]", b""), ["must be a JSON object, got list"], id="header-list"),
    pytest.param(lambda p: _write(p, BOMB, b""), ["nested too deeply"], id="header-bomb"),
    pytest.param(lambda p: _write(p, b"\xff\xfe not json", b""), ["not JSON"], id="header-garbage"),
    pytest.param(_duplicate, ["key 'head.bias' appears twice"], id="duplicate-key"),
    pytest.param(mlx_edit(lambda w: w.update({"head.weight": mx.zeros((19, 25))})), ["tensor 'head.weight' has shape (19, 25), the architecture needs (19, 24)"], id="wrong-shape"),
    pytest.param(mlx_edit(lambda w: w.update({"head.bias": mx.zeros((19,), mx.int32)})), ["tensor 'head.bias' has dtype int32"], id="wrong-dtype"),
    pytest.param(mlx_edit(lambda w: w.pop("encoder.1.0.conv2.weight")), ["missing tensor 'encoder.1.0.conv2.weight' (16, 3, 3, 3, 16)"], id="missing-tensor"),
    pytest.param(mlx_edit(lambda w: w.update({"extra.weight": mx.zeros((2,))})), ["unexpected tensor 'extra.weight'"], id="extra-tensor"),
    pytest.param(lambda p: p.write_bytes(pickle.dumps({"head.weight": [1.0]})), ["unreadable safetensors file"], id="pickle"),
    pytest.param(lambda p: p.unlink(), [f"missing {FILE}"], id="no-weights"),
]  # fmt: skip


@pytest.mark.parametrize("edit, needles", WEIGHT_CASES)
def test_hostile_weight_file(bundle, tmp_path, edit, needles):
    edit(bundle / FILE)
    out = tmp_path / "out.ply"
    assert_refused(model_run(bundle, out), bundle, out, *needles)


# ---- checksum policy -----------------------------------------------------------------------


def test_missing_sha256_warns_and_require_checksum_refuses(bundle, tmp_path):
    edit_json(bundle, lambda d: d["weights"].pop("sha256"))
    out = tmp_path / "out.ply"
    r = model_run(bundle, out)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        f"lattice: warning: {bundle}: model.json records no weights.sha256: the weights were loaded "
        "without an integrity check (--require-checksum refuses such bundles)"
    ]
    assert out.exists()
    out.unlink()
    refused = model_run(bundle, out, "--require-checksum")
    assert_refused(refused, bundle, out, "no weights.sha256", "--require-checksum")


def test_shipped_bundle_passes_require_checksum(tmp_path):
    out = tmp_path / "out.ply"
    r = model_run(SHIPPED, out, "--require-checksum")
    assert r.returncode == 0 and r.stderr == "" and out.exists(), r.stderr


def test_shipped_and_saved_bundles_carry_a_verified_sha256(tmp_path):
    shipped = load_model(SHIPPED)
    assert shipped.checksum_verified
    assert shipped.sha256 == read_model_json(SHIPPED)["weights"]["sha256"] == sha256_of(SHIPPED / FILE)
    path = tmp_path / "m"
    from lattice.models import save_model

    save_model(shipped.model, path, preprocessing=shipped.preprocessing, outputs=shipped.outputs)
    assert read_model_json(path)["weights"]["sha256"] == sha256_of(path / FILE)
    assert load_model(path).sha256 == sha256_of(path / FILE)


def test_require_checksum_in_the_library(bundle):
    edit_json(bundle, lambda d: d["weights"].pop("sha256"))
    assert load_model(bundle).sha256 is None and not load_model(bundle).checksum_verified
    with pytest.raises(BundleError, match="no weights.sha256, and a checksum is required"):
        load_model(bundle, require_checksum=True)


# ---- load order and the computed tensors ---------------------------------------------------


CONFIGS = [
    UNetConfig(5, 19, 8, 3, (8, 16, 32, 64), (1, 1, 1, 1), (64, 32, 24, 24), (1, 1, 1, 1)),
    UNetConfig(3, 2, 6, 5, (6, 40, 70), (2, 1, 3), (70, 33, 8), (1, 2, 2)),
    UNetConfig(1, 1, 1, 1, (1,), (1,), (1,), (1,)),
    ResNetConfig(4, 7, 8, 3, (8, 16, 100), (2, 1, 3)),
    ResNetConfig(2, 3, 200, 7, (200,), (1,)),
]
QUANTS = [None, Quantization(8), Quantization(4), Quantization(4, 64), Quantization(8, 128)]


@pytest.mark.parametrize("quant", QUANTS, ids=str)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.name}-{c.stem_channels}")
def test_parameter_specs_are_the_module_tree(config, quant):
    model = (MinkUNet if isinstance(config, UNetConfig) else SparseResNet)(config)
    if quant is not None:
        quantize(model, bits=quant.bits, group_size=quant.group_size)
    tree = {k: (tuple(v.shape), v.dtype) for k, v in tree_flatten(model.parameters())}
    specs = parameter_specs(config, quant)
    kinds = {mx.float32: "float", mx.uint32: "packed", mx.float16: "scale"}
    assert {k: (s.shape, s.kind) for k, s in specs.items()} == {
        k: (s, kinds[d]) for k, (s, d) in tree.items()
    }


def test_building_is_lazy_and_cheap():
    """The widest configuration the per-key bounds allow builds as a module tree without
    allocating (MLX's lazy arrays); the value cap is what stops a bundle from asking for it."""
    cfg = UNetConfig(5, 19, **{k: tuple(v) if isinstance(v, list) else v for k, v in WIDEST.items()})
    values = sum(s.size for s in parameter_specs(cfg).values())
    assert values > 1000 * MAX_VALUES
    before = mx.get_active_memory()
    model = MinkUNet(cfg)
    assert mx.get_active_memory() - before < 1 << 20
    assert math.prod(model.stem.conv.weight.shape) == 4096 * 5**3 * 5


def test_nothing_is_built_before_the_weights_fit(bundle, float_bundle, monkeypatch):
    built = []
    original = MinkUNet.__init__
    monkeypatch.setattr(MinkUNet, "__init__", lambda self, c: (built.append(c), original(self, c))[1])
    mlx_edit(lambda w: w.pop("head.bias"))(bundle / FILE)
    with pytest.raises(BundleError, match="missing tensor 'head.bias'"):
        load_model(bundle)
    edit_json(bundle, lambda d: d.update(quantization={"bits": 8}))
    with pytest.raises(BundleError, match="missing tensor 'stem.conv.scales'"):
        load_model(bundle)
    assert built == []
    shutil.copy(float_bundle / FILE, bundle / FILE)
    edit_json(bundle, lambda d: d.update(quantization=None))
    assert load_model(bundle).checksum_verified and len(built) == 1


def test_a_packed_bundle_is_loaded_without_quantizing(tmp_path, float_bundle, monkeypatch):
    from lattice.models import save_model
    from lattice.nn import quantized as nq

    shipped = load_model(float_bundle, quantize_bits=4)
    path = save_model(
        shipped.model, tmp_path / "q4", preprocessing=shipped.preprocessing, outputs=shipped.outputs
    )

    def refuse(*args, **kwargs):
        raise AssertionError("quantize_weight called while loading a packed bundle")

    monkeypatch.setattr(nq, "quantize_weight", refuse)
    loaded = load_model(path)
    assert loaded.quantization == Quantization(4)
    want = dict(tree_flatten(shipped.model.parameters()))
    for key, value in tree_flatten(loaded.model.parameters()):
        assert value.dtype == want[key].dtype and mx.array_equal(value, want[key]).item(), key


def test_from_packed_equals_from_conv():
    conv = SubmConv3d(40, 8, kernel_size=3, bias=True)
    twin = QuantizedSubmConv3d.from_conv(conv, bits=8)
    rebuilt = from_packed(SubmConv3d(40, 8, kernel_size=3, bias=True), twin.qweight())
    rebuilt.bias = twin.bias
    assert type(rebuilt) is QuantizedSubmConv3d and rebuilt.spec == twin.spec
    for key, value in tree_flatten(twin.parameters()):
        assert mx.array_equal(value, rebuilt[key.split(".")[0]]).item()
    with pytest.raises(ValueError, match=r"needs a linear or dense packed weight of that shape"):
        from_packed(SubmConv3d(41, 8), twin.qweight())
    with pytest.raises(TypeError, match="has no quantized form"):
        from_packed(MinkUNet(CONFIGS[2]).stem.norm, twin.qweight())


# ---- the checks themselves ------------------------------------------------------------------


def test_bounds_accept_the_presets_and_name_the_key():
    fields = {f for f in UNetConfig.__dataclass_fields__ if f != "name"}
    for preset in (14, 18, 34):
        from lattice.models import minkunet

        check_config(minkunet(preset, 4096, 4096, width=32, stem_kernel=9).config.to_dict(), fields)
    with pytest.raises(
        BundleError, match=r"architecture.config.stem_kernel must be an odd integer in 1..9, got 3.0"
    ):
        check_config({"in_channels": 1, "num_classes": 1, "stem_kernel": 3.0}, fields)
    with pytest.raises(
        BundleError, match=r"architecture.config.encoder_blocks must be a list of 1..8 entries"
    ):
        build_model("minkunet", {"in_channels": 1, "num_classes": 1, "encoder_blocks": [65, 1, 1, 1]})
    with pytest.raises(BundleError, match=r"a\.b\[0\] is nested more than 2 levels deep"):
        check_depth({"a": {"b": [[[1]]]}}, limit=2)


def test_quantization_values_must_be_integers(bundle):
    for bits, group in ((8.0, None), (True, None), (8, 64.0), (8, False)):
        with pytest.raises(BundleError, match="quantization"):
            Quantization(bits, group)
    with pytest.raises(
        BundleError, match=r"quantize_bits=3, group_size=None: quantization.bits must be 4 or 8"
    ):
        load_model(bundle, quantize_bits=3)
    with pytest.raises(BundleError, match=r"quantize_bits=8, group_size=48: quantization.group_size"):
        load_model(bundle / "nope", quantize_bits=8, group_size=48)  # checked before the bundle is read


def test_every_config_field_has_a_bound():
    for config_cls in (UNetConfig, ResNetConfig):
        fields = {f for f in config_cls.__dataclass_fields__ if f != "name"}
        assert fields <= set(CONFIG_BOUNDS), fields - set(CONFIG_BOUNDS)


@pytest.mark.parametrize("which", ["shipped", "float"])
def test_read_header_agrees_with_mlx(which, float_bundle):
    folder = SHIPPED if which == "shipped" else float_bundle  # packed int4 (uint32 + float32), float32
    header = read_header(folder / FILE)
    tensors = mx.load(str(folder / FILE))
    assert set(header.tensors) == set(tensors) and header.metadata == {"format": "lattice.model/1"}
    names = {"F32": (mx.float32, np.float32), "U32": (mx.uint32, np.uint32)}
    raw = (folder / FILE).read_bytes()
    for name, entry in header.tensors.items():
        dtype, np_dtype = names[entry.dtype]
        assert entry.shape == tuple(tensors[name].shape) and dtype == tensors[name].dtype
        values = np.frombuffer(raw[entry.begin : entry.end], np_dtype).reshape(entry.shape)
        assert np.array_equal(values, np.asarray(tensors[name]))
