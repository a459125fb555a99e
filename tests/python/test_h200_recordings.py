"""The profiler's parser and classifier on this project's own H200 recordings (transpose v0, v1)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES
from kernel_loop.steps.profile import build_profile


def _profile(version: str) -> dict:
    raw = (FIXTURES / "ncu" / f"h200_transpose_{version}_raw.csv").read_text()
    details = (FIXTURES / "ncu" / f"h200_transpose_{version}_details.csv").read_text()
    return build_profile(raw, details, None, {"version": version})


def _tags(profile: dict) -> set[str]:
    return {s["tag"] for s in profile["symptoms"]}


def test_naive_transpose_is_flagged_uncoalesced():
    p = _profile("v0")
    assert [k["name"] for k in p["kernels"]] == ["transpose_naive(const float *, float *, int, int)"]
    assert p["gpu"]["name"] == "NVIDIA H200" and p["gpu"]["sm_count"] == 132
    assert p["bottleneck"] == "memory-bound"
    assert "uncoalesced-global" in _tags(p)
    assert p["metrics"]["global_excess_sectors_pct"] > 50
    # the warp-state and scheduler sections were collected on this recording
    assert p["metrics"]["issue_active"] is not None and p["metrics"]["stall_long_scoreboard"] is not None


def test_unpadded_tile_is_flagged_for_bank_conflicts_not_coalescing():
    p = _profile("v1")
    tags = _tags(p)
    assert "smem-bank-conflicts" in tags and "uncoalesced-global" not in tags
    assert p["metrics"]["smem_bank_conflicts_pct"] > 50
    assert p["metrics"]["global_excess_sectors_pct"] == pytest.approx(0, abs=1)


def test_the_tile_cut_duration_and_excess_sectors():
    v0, v1 = _profile("v0"), _profile("v1")
    assert v1["metrics"]["duration_us"] < v0["metrics"]["duration_us"] / 2
    assert v1["metrics"]["dram_bytes_read"] == pytest.approx(v0["metrics"]["dram_bytes_read"], rel=0.15)
