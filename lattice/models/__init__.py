"""Sparse networks built from :mod:`lattice.nn`, model bundles, and inference on point clouds.

- :mod:`lattice.models.unet` — ``MinkUNet`` (``UNetConfig``; ``minkunet(14 | 18 | 34, ...)``):
  per-voxel segmentation;
- :mod:`lattice.models.resnet` — ``SparseResNet`` (``ResNetConfig``; ``sparse_resnet(...)``):
  one label per point cloud, through global average pooling;
- :mod:`lattice.models.bundle` — ``save_model`` / ``load_model``: a directory with
  ``model.json`` and ``weights.safetensors`` (no pickle, no code execution on load);
- :mod:`lattice.models.limits` — the bounds a bundle's architecture config must keep;
  :mod:`lattice.models.params` — the tensors a config implies, computed without building;
  :mod:`lattice.models.weightfile` — the safetensors header checked before any tensor is read;
- :mod:`lattice.models.spec` — what ``model.json`` holds (``Preprocessing``,
  ``FeatureSpec``, ``Outputs``, ``ClassInfo``, ``Quantization``) and ``BundleError``;
- :mod:`lattice.models.predict` — ``predict_cloud`` / ``predict_points``: preprocess as
  the bundle says, run, map the voxel outputs back to every input point;
- :mod:`lattice.models.domain` — ``domain_stats`` (what the training inputs looked like,
  stored as ``model.json``'s ``domain``) and ``check_domain`` (warnings for inputs far from it);
- :mod:`lattice.models.metrics` — confusion matrix, per-class IoU, mIoU, accuracy.

See ``docs/models.md``; ``lattice model-run`` is the command-line front end.
"""

from lattice.models.blocks import BasicBlock, ConvBNReLU, UpBlock
from lattice.models.bundle import (
    ARCHITECTURES,
    ModelBundle,
    build_model,
    load_model,
    read_model_json,
    save_model,
)
from lattice.models.domain import check_domain, domain_stats
from lattice.models.metrics import SegmentationScores, format_scores, segmentation_scores
from lattice.models.predict import Prediction, point_features, predict_cloud, predict_points
from lattice.models.resnet import RESNET_PRESETS, ResNetConfig, SparseResNet, sparse_resnet
from lattice.models.spec import (
    BUNDLE_FORMAT,
    BundleError,
    ClassInfo,
    Domain,
    FeatureSpec,
    Outputs,
    Preprocessing,
    Quantization,
    ValueStats,
)
from lattice.models.unet import UNET_PRESETS, MinkUNet, UNetConfig, minkunet

__all__ = [
    "ARCHITECTURES",
    "BUNDLE_FORMAT",
    "RESNET_PRESETS",
    "UNET_PRESETS",
    "BasicBlock",
    "BundleError",
    "ClassInfo",
    "ConvBNReLU",
    "Domain",
    "FeatureSpec",
    "MinkUNet",
    "ModelBundle",
    "Outputs",
    "Prediction",
    "Preprocessing",
    "Quantization",
    "ResNetConfig",
    "SegmentationScores",
    "SparseResNet",
    "UNetConfig",
    "UpBlock",
    "ValueStats",
    "build_model",
    "check_domain",
    "domain_stats",
    "format_scores",
    "load_model",
    "minkunet",
    "point_features",
    "predict_cloud",
    "predict_points",
    "read_model_json",
    "save_model",
    "segmentation_scores",
    "sparse_resnet",
]
