"""Shared pytest set-up: import the helpers from the source tree; the gpu marker."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "helpers"))

FIXTURES = REPO / "tests" / "fixtures"
SHARED_NCU = REPO.parent / "shared" / "fixtures" / "ncu-h100"


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Keep the KBS index and build caches out of the user's home during tests."""
    cache = tmp_path_factory.getbasetemp() / "kl-cache"
    monkeypatch.setenv("KERNEL_LOOP_CACHE", str(cache))
    yield


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def helpers_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "helpers") + os.pathsep + env.get("PYTHONPATH", "")
    return env
