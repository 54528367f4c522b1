"""Feature modules (lattice.nn.feature): same results as the mlx.nn parents on the
features, SparseTensor in and out on the same key, state handling, and training."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
import pytest
from conftest import make_cloud

from lattice.backends.cpu import blas
from lattice.core import SparseTensor
from lattice.nn import feature as L

RNG = np.random.default_rng(3)


def _tensor(cloud="batched", c=4, **kwargs) -> SparseTensor:
    coords = make_cloud(cloud)
    return SparseTensor(coords, RNG.normal(size=(len(coords), c)).astype(np.float32), **kwargs)


MODULES = [
    (L.Linear, nn.Linear, (4, 3)),
    (L.Linear, nn.Linear, (4, 2, False)),
    (L.ReLU, nn.ReLU, ()),
    (L.Sigmoid, nn.Sigmoid, ()),
    (L.GELU, nn.GELU, ()),
    (L.GELU, nn.GELU, ("fast",)),
    (L.SiLU, nn.SiLU, ()),
    (L.LeakyReLU, nn.LeakyReLU, (0.2,)),
    (L.Tanh, nn.Tanh, ()),
    (L.Softplus, nn.Softplus, ()),
    (L.LayerNorm, nn.LayerNorm, (4,)),
    (L.LayerNorm, nn.LayerNorm, (4, 1e-5, False)),
    (L.RMSNorm, nn.RMSNorm, (4,)),
    (L.BatchNorm, nn.BatchNorm, (4,)),
]


@pytest.mark.parametrize("ours,parent,args", MODULES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_module_matches_parent_on_features(ours, parent, args):
    module = ours(*args)
    assert isinstance(module, parent)
    reference = parent(*args)
    reference.update(module.parameters())  # same weights
    module.eval()
    reference.eval()
    x = _tensor()
    y = module(x)
    assert isinstance(y, SparseTensor)
    assert y.coord_key == x.coord_key and y.coord_manager is x.coord_manager
    expected = np.asarray(reference(x.feats))
    np.testing.assert_allclose(np.asarray(y.feats), expected, rtol=1e-5, atol=1e-5)
    plain = module(x.feats)
    assert isinstance(plain, mx.array)
    np.testing.assert_allclose(np.asarray(plain), expected, rtol=1e-5, atol=1e-5)


def test_linear_parameters_and_route(monkeypatch):
    calls = []
    real = blas.blas_gemm
    monkeypatch.setattr(blas, "blas_gemm", lambda a, b, **k: calls.append(a.shape) or real(a, b, **k))
    lin = L.Linear(4, 6)
    assert set(lin.parameters()) == {"weight", "bias"} and lin.weight.shape == (6, 4)
    assert set(L.Linear(4, 6, bias=False).parameters()) == {"weight"}
    x = _tensor()
    with mx.stream(mx.cpu):
        lin(x)
    assert calls == [(x.active_count, 4)]


def test_dropout_respects_training_mode():
    x = SparseTensor(make_cloud("dense_block"), mx.ones((1728, 2)))
    drop = L.Dropout(0.5)
    y = drop(x)
    vals = np.asarray(y.feats)
    assert y.coord_key == x.coord_key and 0.4 < (vals == 0).mean() < 0.6
    assert set(np.unique(vals).tolist()) == {0.0, 2.0}
    drop.eval()
    assert np.array_equal(np.asarray(drop(x).feats), np.ones((1728, 2)))


def test_batch_norm_uses_active_rows_and_updates_running_stats_like_mlx():
    coords = make_cloud("random_sparse")
    feats = RNG.normal(size=(len(coords), 3)).astype(np.float32) * 3 + 1
    feats[200:] = 1e6  # rows past active_rows must not enter the statistics
    x = SparseTensor(coords, feats, active_rows=200)
    ours, ref = L.BatchNorm(3, momentum=0.3), nn.BatchNorm(3, momentum=0.3)
    y = ours(x)
    expected = ref(mx.array(feats[:200]))
    assert y.active_count == 200 and y.coord_key == x.coord_key
    np.testing.assert_allclose(np.asarray(y.feats), np.asarray(expected), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ours.running_mean), np.asarray(ref.running_mean), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ours.running_var), np.asarray(ref.running_var), rtol=1e-6)
    assert np.allclose(np.asarray(ours.running_mean), 0.3 * feats[:200].mean(0), rtol=1e-5)
    assert set(ours.trainable_parameters()) == {"weight", "bias"}
    ours.eval()
    z = ours(x)
    ref_eval = (feats[:200] - np.asarray(ours.running_mean)) / np.sqrt(np.asarray(ours.running_var) + 1e-5)
    np.testing.assert_allclose(np.asarray(z.feats), ref_eval, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(50, 3), (6, 7, 3), (2, 4, 5, 3)])
@pytest.mark.parametrize("track", [True, False])
def test_batch_norm_on_plain_arrays_is_mlx_batch_norm(shape, track):
    feats = mx.array(RNG.normal(size=shape).astype(np.float32) * 2 - 1)
    ours, ref = L.BatchNorm(3, track_running_stats=track), nn.BatchNorm(3, track_running_stats=track)
    for _ in range(2):  # running stats updated twice
        np.testing.assert_allclose(np.asarray(ours(feats)), np.asarray(ref(feats)), rtol=1e-5, atol=1e-5)
    if track:
        for a in ("running_mean", "running_var"):
            np.testing.assert_allclose(np.asarray(ours[a]), np.asarray(ref[a]), rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="more than one value per channel"):
        ours(mx.zeros((1, 3)))
    with pytest.raises(ValueError, match="2, 3 or 4 dimensions"):
        ours(mx.zeros((3,)))
    one_row = SparseTensor(np.zeros((1, 4), np.int32), np.ones((1, 3), np.float32))
    with pytest.raises(ValueError, match="more than one value per channel"):
        ours(one_row)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = L.Linear(3, 16)
        self.act = L.ReLU()
        self.bn = L.BatchNorm(16)
        self.drop = L.Dropout(0.1)
        self.fc2 = L.Linear(16, 1)

    def __call__(self, x: SparseTensor) -> SparseTensor:
        return self.fc2(self.drop(self.bn(self.act(self.fc1(x)))))


@pytest.mark.parametrize(
    "optimizer", [lambda: optim.Adam(learning_rate=3e-2), lambda: optim.SGD(learning_rate=0.1)]
)
def test_tiny_model_trains_on_a_sparse_tensor(optimizer):
    mx.random.seed(0)
    x = _tensor("random_sparse", c=3)
    target = mx.sum(mx.abs(x.feats), axis=1, keepdims=True)
    model, opt = _Net(), optimizer()

    def loss_fn(model, x):
        y = model(x)
        assert isinstance(y, SparseTensor) and y.coord_key == x.coord_key
        return mx.mean((y.feats - target) ** 2)

    step = nn.value_and_grad(model, loss_fn)
    losses = []
    for _ in range(25):
        loss, grads = step(model, x)
        opt.update(model, grads)
        mx.eval(model.parameters(), opt.state)
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert not np.allclose(np.asarray(model.bn.running_mean), 0)  # stats were updated in training
    model.eval()
    assert model(x).shape == (x.active_count, 1)


def test_modules_reject_non_tensors():
    with pytest.raises(TypeError, match=r"^\[linear\] x must be a SparseTensor or an mx.array, got list"):
        L.Linear(2, 2)([[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"^\[linear\] weight must have shape \(out, 4\), got \(3, 2\)"):
        L.Linear(2, 3)(_tensor())
