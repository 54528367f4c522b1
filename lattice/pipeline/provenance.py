"""What made an output: the command, its parameters, lattice's version and the input it read.

Every output of a file command records this (the ``provenance`` key of a sparse NPZ or of a
points NPZ, else a sidecar ``<output>.lattice.json``), so a batch re-run can tell an output
made with the same parameters from the same input (skip it) from one made otherwise (redo
it). ``matches`` is that test.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import BinaryIO

import numpy as np

SIDECAR = ".lattice.json"


def input_stamp(src: str | os.PathLike | BinaryIO) -> dict | None:
    """The input's name, size and modification time, or a URL's ETag (None for a stream)."""
    from lattice.io import storage

    if hasattr(src, "read"):
        return None
    try:
        return storage.stamp(src)
    except (OSError, storage.StorageError):
        return None


def make_record(command: str, parameters: dict, src: str | os.PathLike | BinaryIO | None = None) -> dict:
    """The provenance record of an output made by ``command`` with ``parameters`` from ``src``."""
    from lattice._version import __version__

    record = {"command": command, "parameters": parameters, "lattice": __version__}
    stamp = None if src is None else input_stamp(src)
    if stamp is not None:
        record["input"] = stamp
    return json.loads(json.dumps(record))  # JSON values only (tuples become lists)


def matches(record: dict | None, command: str, parameters: dict, src: str | os.PathLike) -> bool:
    """True when ``record`` says the output was made by ``command`` with ``parameters`` from ``src`` as it is now."""
    if not record:
        return False
    want = make_record(command, parameters, src)
    return all(record.get(k) == want.get(k) for k in ("command", "parameters", "input"))


def sidecar_path(dst: str | os.PathLike) -> str:
    """Where the provenance of a non-NPZ output is recorded: ``<dst>.lattice.json``."""
    return os.fspath(dst) + SIDECAR


def write_sidecar(dst: str | os.PathLike, record: dict) -> None:
    """Write the provenance ``record`` of output ``dst`` beside it (atomically)."""
    from lattice.io.atomic import atomic_write

    with atomic_write(sidecar_path(dst)) as f:
        f.write((json.dumps(record, indent=1, sort_keys=True) + "\n").encode())


def read_record(dst: str | os.PathLike) -> dict | None:
    """The provenance recorded for an existing output (sidecar or NPZ key), or None when it has none."""
    from lattice.io import storage

    path = os.fspath(dst)
    side = sidecar_path(path)
    try:
        if storage.exists(side):
            with storage.open_read(side) as f:
                record = json.loads(f.read().decode("utf-8"))
            return record if isinstance(record, dict) else None
        if path.lower().endswith(".npz"):
            with storage.open_read(path) as f, zipfile.ZipFile(f) as zf:  # a URL: ranged reads
                if "provenance.npy" not in zf.namelist():
                    return None
                with zf.open("provenance.npy") as m:
                    a = np.lib.format.read_array(m, allow_pickle=False)
            record = json.loads(str(a.reshape(())))
            return record if isinstance(record, dict) else None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # StorageError is a ValueError
        return None
    return None


__all__ = ["SIDECAR", "input_stamp", "make_record", "matches", "read_record", "sidecar_path", "write_sidecar"]
