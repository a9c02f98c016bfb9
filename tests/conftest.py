"""Shared fixtures: a temporary corpus directory and an isolated state dir."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    """An empty directory to fill with files; it is the root being indexed."""
    root = tmp_path / "corpus"
    root.mkdir()
    return root


from tests.fakes.mistral import fake_mistral  # noqa: E402, F401
from tests.up_process import running  # noqa: E402, F401  (a fixture: `up` processes, killed after the test)
