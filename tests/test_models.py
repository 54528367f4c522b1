"""lattice.models: MinkUNet / SparseResNet, bundle round trips, bad bundles, metrics."""

from __future__ import annotations

import json
import pickle

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
import pytest
from mlx.utils import tree_flatten, tree_map

import lattice
from lattice import ops
from lattice.models import (
    BundleError,
    ClassInfo,
    FeatureSpec,
    MinkUNet,
    Outputs,
    Preprocessing,
    ResNetConfig,
    UNetConfig,
    UpBlock,
    load_model,
    minkunet,
    read_model_json,
    save_model,
    segmentation_scores,
    sparse_resnet,
)
from lattice.nn import ConvTranspose3d, quantize

PRE = Preprocessing((0.25,) * 3, (FeatureSpec("ones"), FeatureSpec("z", 0.5, 2.0)))
OUT = Outputs(
    (ClassInfo(1, "floor", (200, 0, 0)), ClassInfo(2, "wall", (0, 200, 0)), ClassInfo(5, "box", (0, 0, 200))),
    ClassInfo(0, "unlabeled", (0, 0, 0)),
)


def scene(n=3000, seed=0, batch=None) -> lattice.SparseTensor:
    """Random points in a 4 m box voxelized at 0.25 m, features ones + z."""
    rng = np.random.default_rng(seed)
    pts = rng.uniform(-2, 2, size=(n, 3)).astype(np.float32)
    feats = np.stack([np.ones(n), pts[:, 2]], axis=1).astype(np.float32)
    return ops.voxelize(pts, feats, 0.25, batch_indices=batch)


@pytest.fixture
def unet() -> MinkUNet:
    mx.random.seed(1)
    model = minkunet(14, 2, 3, width=4)
    model.eval()
    return model


def _train_a_step(model, x):
    """One SGD step so BatchNorm running statistics are not the defaults."""
    model.train()
    y = mx.array(np.arange(x.active_count) % model.config.num_classes)

    def loss(m):
        return nn.losses.cross_entropy(m(x).feats, y, reduction="mean")

    value, grads = nn.value_and_grad(model, loss)(model)
    optim.SGD(learning_rate=0.05).update(model, grads)
    mx.eval(model.parameters())
    model.eval()
    return float(value)


# ---- architectures -------------------------------------------------------------------------


@pytest.mark.parametrize("preset", [14, 18, 34])
def test_minkunet_presets_keep_the_input_support(preset):
    x = scene(800)
    model = minkunet(preset, 2, 5, width=4)
    y = model(x)
    assert y.coord_key == x.coord_key and y.coord_manager is x.coord_manager
    assert y.feats.shape == (x.active_count, 5)
    blocks = sum(len(b) for b in model.encoder) + sum(len(u.blocks) for u in model.decoder)
    assert blocks == {14: 8, 18: 16, 34: 23}[preset]


def test_minkunet_builds_each_relation_once():
    """A forward on new coordinates builds every relation once, and the decoder's k=3 map of
    the input set is cut from the k=5 stem's (route ``cpu.restricted``), not built again; a
    second forward on the same tensor builds nothing."""
    from lattice.core import RelationKind
    from lattice.core.kernel import KernelSpec

    x = scene(1500)
    model = minkunet(14, 2, 3, width=4)
    assert model.config.stem_kernel == 5
    model.eval()
    built = []
    manager = x.coord_manager
    original = manager._build

    def counted(kind, in_key, spec, target_key, op, device=None):
        rel = original(kind, in_key, spec, target_key, op, device)
        built.append((kind, in_key, spec, target_key, rel.route.name))
        return rel

    manager._build = counted
    first = np.asarray(model(x).feats)
    assert len(built) == len({b[:4] for b in built})
    level0 = {b[2].size: b[4] for b in built if b[0] is RelationKind.SUBMANIFOLD and b[1] == x.coord_key}
    assert level0[(5, 5, 5)] != "cpu.restricted" and level0[(3, 3, 3)] == "cpu.restricted"
    count = len(built)
    np.testing.assert_array_equal(np.asarray(model(x).feats), first)
    assert len(built) == count
    # the same outputs as a forward whose k=3 map of the input is built afresh
    fresh = scene(1500)
    fresh.coord_manager.relation(RelationKind.SUBMANIFOLD, fresh.coord_key, KernelSpec(3))
    np.testing.assert_allclose(np.asarray(model(fresh).feats), first, rtol=1e-5, atol=1e-5)


def test_minkunet_depth_and_widths_are_configurable():
    cfg = UNetConfig(2, 4, stem_channels=6, stem_kernel=3, encoder_channels=(8, 12), encoder_blocks=(1, 2),
                     decoder_channels=(10, 6), decoder_blocks=(1, 1))  # fmt: skip
    model = MinkUNet(cfg)
    assert cfg.depth == 2 and len(model.down) == 2
    assert model(scene(500)).feats.shape[1] == 4
    assert UNetConfig(**cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"encoder_channels": (8,)}, "one entry per level"),
        ({"stem_kernel": 4}, "stem_kernel must be odd"),
        ({"decoder_blocks": (1, 0, 1, 1)}, "decoder_blocks must be a non-empty list of positive ints"),
        ({"in_channels": 0}, "in_channels must be a positive int, got 0"),
    ],
)
def test_unet_config_errors_name_the_value(kwargs, message):
    args = {"in_channels": 2, "num_classes": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        UNetConfig(**args)


def test_minkunet_trains():
    mx.random.seed(0)
    x = scene(1500)
    model = minkunet(14, 2, 3, width=4)
    first = _train_a_step(model, x)
    for _ in range(5):
        last = _train_a_step(model, x)
    assert last < first


def test_minkunet_starting_its_stages_early_changes_no_bit(monkeypatch):
    """On the GPU a MinkUNet queues each stage (``blocks.started``: ``mx.async_eval``) while
    Python builds the next; here the CPU is made to take that path. The forward gives the
    same bits, and under ``value_and_grad`` (where MLX refuses ``async_eval``) the loss and
    gradients are those of the plain path."""
    from lattice.models import blocks

    mx.random.seed(3)
    x = scene(2000)
    model = minkunet(14, 2, 3, width=4)
    _train_a_step(model, x)
    y = mx.array(np.arange(x.active_count) % 3)

    def loss(m):
        return nn.losses.cross_entropy(m(x).feats, y, reduction="mean")

    start = tree_map(lambda a: a, model.parameters())  # training mode moves the running statistics

    def run():
        model.update(start)
        model.eval()
        out = model(x).feats
        model.train()
        value, grads = nn.value_and_grad(model, loss)(model)
        mx.eval(out, value, grads)
        return [np.array(out), np.array(value)] + [np.array(g) for _, g in tree_flatten(grads)]

    queued, async_eval = [], mx.async_eval

    def counted(*arrays):  # the calls MLX took (it raises inside value_and_grad)
        async_eval(*arrays)
        queued.append(len(arrays))

    monkeypatch.setattr(mx, "async_eval", counted)
    monkeypatch.setattr(blocks, "requested_device", lambda device: "cpu")
    plain = run()
    assert queued == []
    monkeypatch.setattr(blocks, "requested_device", lambda device: "gpu")
    early = run()
    assert len(queued) == 1 + 4 + 4  # the stem, each encoder level, each decoder level (eval only)
    assert len(plain) == len(early)
    for a, b in zip(plain, early, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("rounder", ["avx512_bf16", "amx_bf16"])
def test_minkunet_on_the_bfloat16_kernel_stays_near_float32(monkeypatch, rounder):
    """``LATTICE_CPU_GEMM=avx512_bf16`` (and ``amx_bf16``, the same products with the forward on
    AMX tiles) through a whole network against the float32 kernel: the
    eval forward and the loss within bfloat16's rounding (and not equal: it did round), the
    head's gradients within a few percent. The gradients of the early layers of this small
    random network are ill-conditioned in train mode — scaling its float32 weights by
    1 +- 2^-9 at random moves the stem's gradient by about 20 % — so for those only the
    direction of the whole gradient is asked of (cosine above 0.8; 0.89 measured)."""
    from lattice import _ext
    from lattice.routing.device import capability

    if rounder not in _ext.conv_kernels():
        pytest.skip(f"this CPU runs no {rounder} kernel")
    mx.random.seed(4)
    x = scene(2500)
    model = minkunet(14, 2, 3, width=8)
    _train_a_step(model, x)
    start = tree_map(lambda a: a, model.parameters())
    y = mx.array(np.arange(x.active_count) % 3)

    def run(kernel):
        monkeypatch.setenv("LATTICE_CPU_GEMM", kernel)
        capability.cache_clear()
        model.update(start)
        model.eval()
        out = model(x).feats
        model.train()
        loss, grads = nn.value_and_grad(
            model, lambda m: nn.losses.cross_entropy(m(x).feats, y, reduction="mean")
        )(model)
        mx.eval(out, loss, grads)
        return np.array(out), float(loss), dict((k, np.array(g)) for k, g in tree_flatten(grads))

    try:
        (out, loss, grads), (out_r, loss_r, grads_r) = run("avx512"), run(rounder)
    finally:
        capability.cache_clear()

    def rel(a, b):
        return float(np.linalg.norm(a - b) / np.linalg.norm(a))

    assert 1e-5 < rel(out, out_r) < 1e-2 and abs(loss - loss_r) < 1e-3 * abs(loss)
    assert rel(grads["head.weight"], grads_r["head.weight"]) < 5e-2
    assert rel(grads["head.bias"], grads_r["head.bias"]) < 5e-2
    g, g_r = (np.concatenate([d[k].ravel() for k in grads]) for d in (grads, grads_r))
    assert np.isfinite(g_r).all() and g @ g_r / (np.linalg.norm(g) * np.linalg.norm(g_r)) > 0.8


def test_up_block_generative_equals_transposed_onto_the_skip():
    """k=2, s=2 generative conv onto the skip's rows sums the same terms as ConvTranspose3d."""
    mx.random.seed(3)
    skip = scene(2000)
    down = ops.conv3d(skip, mx.random.normal((6, 2, 2, 2, 2)), kernel_size=2, stride=2)
    block = UpBlock(6, 2, 4, 1)
    ref = ConvTranspose3d(6, 4, kernel_size=2, stride=2, bias=False)
    ref.weight = block.up.weight
    a, b = block.up(down, skip), ref(down, skip)
    assert a.coord_key == skip.coord_key and b.coord_key == skip.coord_key
    np.testing.assert_allclose(np.asarray(a.feats), np.asarray(b.feats), rtol=1e-5, atol=1e-5)


def test_sparse_resnet_classifies_each_batch_member():
    mx.random.seed(0)
    pts = np.random.default_rng(0).uniform(-2, 2, size=(3000, 3)).astype(np.float32)
    batch = np.repeat(np.arange(3), 1000)
    x = ops.voxelize(pts, np.ones((3000, 2), np.float32), 0.25, batch_indices=batch)
    model = sparse_resnet(18, 2, 7, width=4)
    assert model(x).shape == (3, 7)
    with pytest.raises(ValueError, match="stage_channels and stage_blocks"):
        ResNetConfig(2, 3, stage_channels=(8, 16), stage_blocks=(1,))


# ---- bundles -------------------------------------------------------------------------------


def test_bundle_round_trip_gives_identical_outputs(tmp_path, unet):
    x = scene()
    _train_a_step(unet, x)
    path = save_model(unet, tmp_path / "m", preprocessing=PRE, outputs=OUT, metadata={"note": "test"})
    doc = read_model_json(path)
    assert doc["format"] == "lattice.model/1" and doc["architecture"]["name"] == "minkunet"
    assert doc["weights"]["tensors"] == len(tree_flatten(unet.parameters()))
    bundle = load_model(path)
    assert bundle.preprocessing == PRE and bundle.outputs == OUT and bundle.metadata == {"note": "test"}
    assert bundle.config == unet.config and not bundle.model.training
    assert mx.array_equal(bundle.model(x).feats, unet(x).feats).item()
    assert sorted(p.name for p in path.iterdir()) == ["model.json", "weights.safetensors"]


def test_resnet_bundle_round_trip(tmp_path):
    mx.random.seed(2)
    model = sparse_resnet(14, 2, 3, width=4)
    model.eval()
    x = scene()
    bundle = load_model(save_model(model, tmp_path / "r", preprocessing=PRE, outputs=OUT))
    assert bundle.task == "classification"
    assert mx.array_equal(bundle.model(x), model(x)).item()


def test_half_precision_storage(tmp_path, unet):
    x = scene()
    path = save_model(unet, tmp_path / "h", preprocessing=PRE, outputs=OUT, dtype="float16")
    bundle = load_model(path)
    assert all(v.dtype == mx.float32 for _, v in tree_flatten(bundle.model.parameters()))
    np.testing.assert_allclose(np.asarray(bundle.model(x).feats), np.asarray(unet(x).feats), atol=2e-2)


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_bundles(tmp_path, unet, bits):
    x = scene()
    float_out = np.asarray(unet(x).feats)
    at_load = load_model(save_model(unet, tmp_path / "f", preprocessing=PRE, outputs=OUT), quantize_bits=bits)
    assert at_load.quantization.bits == bits
    quantize(unet, bits=bits)
    stored = load_model(save_model(unet, tmp_path / "q", preprocessing=PRE, outputs=OUT))
    assert read_model_json(tmp_path / "q")["quantization"] == {"bits": bits, "group_size": None}
    packed = np.asarray(unet(x).feats)
    assert np.array_equal(np.asarray(stored.model(x).feats), packed)
    assert np.array_equal(np.asarray(at_load.model(x).feats), packed)
    rel = np.linalg.norm(packed - float_out) / np.linalg.norm(float_out)
    assert rel < (0.05 if bits == 8 else 0.5)
    with pytest.raises(BundleError, match="already quantized"):
        load_model(tmp_path / "q", quantize_bits=8)


def _rewrite_weights(path, edit):
    weights = mx.load(str(path / "weights.safetensors"))
    edit(weights)
    mx.save_safetensors(str(path / "weights.safetensors"), weights)


@pytest.fixture
def bundle_dir(tmp_path, unet):
    return save_model(unet, tmp_path / "b", preprocessing=PRE, outputs=OUT)


def test_missing_tensor_is_named(bundle_dir):
    _rewrite_weights(bundle_dir, lambda w: w.pop("encoder.1.0.conv2.weight"))
    with pytest.raises(BundleError, match=r"missing tensor 'encoder\.1\.0\.conv2\.weight' \(8, 3, 3, 3, 8\)"):
        load_model(bundle_dir)


def test_misshaped_tensor_is_named(bundle_dir):
    _rewrite_weights(bundle_dir, lambda w: w.update({"head.weight": mx.zeros((4, 3))}))
    with pytest.raises(
        BundleError, match=r"tensor 'head\.weight' has shape \(4, 3\), the architecture needs \(3, 12\)"
    ):
        load_model(bundle_dir)


def test_unexpected_and_wrong_dtype_tensors(bundle_dir):
    _rewrite_weights(bundle_dir, lambda w: w.update({"extra.weight": mx.zeros((2,))}))
    with pytest.raises(BundleError, match=r"unexpected tensor 'extra\.weight'"):
        load_model(bundle_dir)
    _rewrite_weights(
        bundle_dir, lambda w: (w.pop("extra.weight"), w.update({"head.bias": mx.zeros((3,), mx.int32)}))
    )
    with pytest.raises(
        BundleError, match=r"tensor 'head\.bias' has dtype int32, the architecture needs a float"
    ):
        load_model(bundle_dir)


def test_replaced_weights_fail_the_digest(bundle_dir):
    _rewrite_weights(bundle_dir, lambda w: w.update({"head.bias": w["head.bias"] + 1}))
    with pytest.raises(BundleError, match="sha256 differs"):
        load_model(bundle_dir)


def _edit_json(path, edit):
    doc = json.loads((path / "model.json").read_text())
    edit(doc)
    (path / "model.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.update(format="lattice.model/9"), "unsupported format 'lattice.model/9'"),
        (lambda d: d["architecture"].update(name="os.system"), "unknown architecture 'os.system'"),
        (lambda d: d["architecture"]["config"].update(bogus=1), r"unknown keys \['bogus'\]"),
        (lambda d: d["architecture"]["config"].update(stem_kernel=2), "stem_kernel must be an odd integer"),
        (lambda d: d["preprocessing"].update(voxel_size=-1), "voxel_size must be a positive finite number"),
        (lambda d: d["preprocessing"]["features"].pop(), "2 inputs"),
        (
            lambda d: d["outputs"]["classes"][0].update(color=[1, 2]),
            r"classes\[0\]\.color must be three ints",
        ),
        (lambda d: d["weights"].update(file="../weights.pkl"), "must be a .safetensors file name"),
        (lambda d: d.pop("outputs"), r"missing keys \['outputs'\]"),
    ],
)
def test_bad_model_json(bundle_dir, edit, message):
    _edit_json(bundle_dir, edit)
    with pytest.raises(BundleError, match=message):
        load_model(bundle_dir)


def test_bundle_path_errors(tmp_path):
    with pytest.raises(BundleError, match="no such model bundle"):
        load_model(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(BundleError, match="is a directory with model.json"):
        load_model(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="missing model.json"):
        load_model(tmp_path / "empty")
    (tmp_path / "empty" / "model.json").write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        load_model(tmp_path / "empty")


def test_pickled_weights_are_refused_never_unpickled(bundle_dir, monkeypatch):
    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('unpickled!')",))

    (bundle_dir / "weights.safetensors").write_bytes(pickle.dumps({"head.weight": Boom()}))
    calls = []
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: calls.append(a))
    with pytest.raises(BundleError, match="unreadable safetensors file"):
        load_model(bundle_dir)
    assert calls == []


def test_save_checks_the_description_fits(tmp_path, unet):
    with pytest.raises(BundleError, match="lists 1 features, the model takes 2"):
        save_model(
            unet, tmp_path / "x", preprocessing=Preprocessing(0.1, (FeatureSpec("ones"),)), outputs=OUT
        )
    with pytest.raises(BundleError, match="save_model supports"):
        save_model(nn.Linear(2, 2), tmp_path / "x", preprocessing=PRE, outputs=OUT)
    with pytest.raises(BundleError, match="unique"):
        Outputs((ClassInfo(1, "a"), ClassInfo(1, "b")))


def test_save_model_takes_the_model_then_the_path(tmp_path, unet):
    """API.md: ``save_model(model, path)``; the other order is a TypeError saying so, and
    writes nothing."""
    import inspect

    assert list(inspect.signature(save_model).parameters)[:2] == ["model", "path"]
    with pytest.raises(TypeError, match=r"save_model takes \(model, path\)"):
        save_model(tmp_path / "old", unet, preprocessing=PRE, outputs=OUT)
    assert not (tmp_path / "old").exists()
    assert load_model(save_model(unet, str(tmp_path / "new"), preprocessing=PRE, outputs=OUT)).name == "new"


# ---- metrics -------------------------------------------------------------------------------


def test_segmentation_scores_by_hand():
    truth = np.array([0, 1, 1, 1, 2, 2, 3, 3])
    pred = np.array([2, 1, 1, 2, 2, 2, 0, 3])
    s = segmentation_scores(truth, pred, [1, 2, 3])
    assert s.labelled == 7  # the truth-0 point is ignored
    assert s.accuracy == pytest.approx(5 / 7)
    np.testing.assert_allclose(s.iou, [2 / 3, 2 / 3, 1 / 2])
    assert s.miou == pytest.approx((2 / 3 + 2 / 3 + 1 / 2) / 3)
    assert s.confusion.tolist() == [[2, 1, 0], [0, 2, 0], [0, 0, 1]]
