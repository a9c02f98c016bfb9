"""What ``search.query_adapter`` may name (corpus/adapter.py). The key comes
from ``.dir2mcp.yaml``, which by default is the root's own file, written by
whoever wrote the directory: a path it names is read as a bounded regular
file holding one ``.npy`` matrix, or refused with CONFIG_INVALID, never a
hang (a FIFO), an endless read (a device) or a crash (an ``.npz``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from corpus import adapter as query_adapter
from kernel import errors


def provenance(path: Path, value: object = None) -> None:
    path.with_suffix(".json").write_text(json.dumps({"model": "m"} if value is None else value))


def npz(path: Path) -> Path:
    with path.open("wb") as out:
        np.savez(out, matrix=np.eye(3, dtype=np.float32))
    provenance(path)
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    provenance(path)
    return path


def oversized(path: Path) -> Path:
    with path.open("wb") as out:
        out.truncate(query_adapter.MAX_MATRIX_BYTES + 1)  # sparse: no disk is spent
    provenance(path)
    return path


def json_not_an_object(path: Path) -> Path:
    np.save(path, np.eye(3, dtype=np.float32))
    provenance(path, "model")
    return path


def json_a_fifo(path: Path) -> Path:
    np.save(path, np.eye(3, dtype=np.float32))
    os.mkfifo(path.with_suffix(".json"))
    return path


def directory(path: Path) -> Path:
    path.mkdir()
    provenance(path)
    return path


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(npz, id="npz-archive"),
        pytest.param(fifo, id="fifo"),
        pytest.param(oversized, id="oversized"),
        pytest.param(json_not_an_object, id="json-not-an-object"),
        pytest.param(json_a_fifo, id="json-a-fifo"),
        pytest.param(directory, id="directory"),
    ],
)
def test_a_path_that_is_not_a_bounded_npy_matrix_is_config_invalid(make, tmp_path):
    path = make(tmp_path / "adapter.npy")
    with pytest.raises(errors.Dir2mcpError) as caught:
        query_adapter.load(str(path))
    assert caught.value.code == errors.CONFIG_INVALID
    assert "search.query_adapter" in caught.value.message


def test_a_character_device_is_refused_without_reading_it():
    with pytest.raises(errors.Dir2mcpError) as caught:
        query_adapter.load("/dev/zero")
    assert caught.value.code == errors.CONFIG_INVALID


def test_a_square_npy_matrix_with_its_provenance_loads(tmp_path):
    path = tmp_path / "adapter.npy"
    np.save(path, np.eye(4, dtype=np.float32))
    provenance(path)
    loaded = query_adapter.load(str(path))
    assert loaded is not None and loaded.model == "m" and loaded.matrix.shape == (4, 4)
