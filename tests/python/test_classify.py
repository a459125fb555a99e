"""Bottleneck classes and symptom tags, firing and not firing at their thresholds."""

from __future__ import annotations

import pytest
from kernel_loop.profiling import classify, metrics
from kernel_loop.vocab import BOTTLENECK_CLASSES, SYMPTOMS


def healthy() -> dict:
    """A kernel on which no tag fires: every value sits on the quiet side of its threshold."""
    m = {k: None for k in metrics.KEYS}
    m.update(duration_us=100.0, sm_throughput_pct=50.0, memory_throughput_pct=55.0, dram_throughput_pct=50.0,
             l2_hit_rate_pct=80.0, global_excess_sectors_pct=0.0, sectors_per_request_ld=4.0,
             sectors_per_request_st=4.0, smem_bank_conflicts_pct=1.0, local_spill_requests=0,
             theoretical_occupancy_pct=100.0, achieved_occupancy_pct=95.0, occupancy_limit_registers=16,
             occupancy_limit_shared_mem=16, occupancy_limit_warps=16, occupancy_limit_blocks=32,
             issue_active=0.9, warp_latency_cycles=10.0, waves_per_sm=10.0, grid_size=1320, sm_count=132,
             block_size=256, tensor_pipe_pct=0.5, gmma_pct=0.0, fma_pipe_pct=10.0, thread_inst_per_inst=32.0)
    for r in metrics.STALL_REASONS:
        m[f"stall_{r}"] = 0.5
    m["stall_long_scoreboard"] = 2.0
    return m


def fired(m: dict, **kw) -> dict:
    out, _ = classify.symptoms(m, **kw)
    return {s["tag"]: s for s in out}


def test_healthy_fires_nothing_and_evaluates_everything():
    out, not_eval = classify.symptoms(healthy(), cc="9.0")
    assert out == [] and not_eval == []


@pytest.mark.parametrize("sm,mem,expected", [
    (22.46, 85.57, "memory-bound"),
    (85.0, 30.0, "compute-bound"),
    (60.0, 50.0, "compute-bound"),     # max >= 60, gap exactly 10
    (60.0, 50.01, "balanced"),         # gap 9.99
    (65.0, 70.0, "balanced"),
    (55.0, 69.0, "memory-bound"),      # Mem >= 60 and 14 ahead
    (59.99, 59.99, "latency-bound"),
    (10.0, 45.0, "latency-bound"),     # big gap but both < 60
    (80.0, 80.0, "balanced"),
])
def test_bottleneck_table(sm, mem, expected):
    assert classify.bottleneck({"sm_throughput_pct": sm, "memory_throughput_pct": mem}) == expected
    assert expected in BOTTLENECK_CLASSES


def test_bottleneck_needs_both_sol_values():
    assert classify.bottleneck({"sm_throughput_pct": 70.0, "memory_throughput_pct": None}) is None
    assert classify.bottleneck({"sm_throughput_pct": float("nan"), "memory_throughput_pct": 70.0}) is None


CASES = [
    # (tag, changes, should fire)
    ("uncoalesced-global", {"global_excess_sectors_pct": 20.0}, True),
    ("uncoalesced-global", {"global_excess_sectors_pct": 19.9}, False),
    ("uncoalesced-global", {"sectors_per_request_ld": 16.6}, True),
    ("uncoalesced-global", {"sectors_per_request_ld": 16.0}, False),   # coalesced 16-byte lanes
    ("uncoalesced-global", {"sectors_per_request_st": 32.0}, True),
    ("smem-bank-conflicts", {"smem_bank_conflicts_pct": 10.0}, True),
    ("smem-bank-conflicts", {"smem_bank_conflicts_pct": 9.9}, False),
    ("register-spills", {"local_spill_requests": 1}, True),
    ("occupancy-limited-registers", {"theoretical_occupancy_pct": 50.0, "occupancy_limit_registers": 4}, True),
    ("occupancy-limited-registers", {"theoretical_occupancy_pct": 80.0, "occupancy_limit_registers": 4}, False),
    ("occupancy-limited-registers", {"theoretical_occupancy_pct": 50.0, "occupancy_limit_shared_mem": 4}, False),
    ("occupancy-limited-smem", {"theoretical_occupancy_pct": 50.0, "occupancy_limit_shared_mem": 4}, True),
    ("occupancy-limited-blocksize", {"theoretical_occupancy_pct": 50.0, "occupancy_limit_warps": 4}, True),
    ("occupancy-limited-blocksize", {"theoretical_occupancy_pct": 50.0, "occupancy_limit_blocks": 4}, True),
    ("achieved-occupancy-gap", {"achieved_occupancy_pct": 89.9}, True),
    ("achieved-occupancy-gap", {"achieved_occupancy_pct": 90.0}, False),
    ("long-scoreboard-stalls", {"stall_long_scoreboard": 3.1, "issue_active": 0.7}, True),
    ("long-scoreboard-stalls", {"stall_long_scoreboard": 3.0, "issue_active": 0.7}, False),
    ("long-scoreboard-stalls", {"stall_long_scoreboard": 3.1, "issue_active": 0.8}, False),
    ("long-scoreboard-stalls", {"stall_long_scoreboard": 3.1, "stall_short_scoreboard": 4.0, "issue_active": 0.7}, False),
    ("short-scoreboard-stalls", {"stall_short_scoreboard": 3.1, "issue_active": 0.7}, True),
    ("short-scoreboard-stalls", {"stall_short_scoreboard": 3.1, "issue_active": 0.9}, False),
    ("barrier-stalls", {"stall_barrier": 3.1, "issue_active": 0.7}, True),
    ("mio-throttle-stalls", {"stall_mio_throttle": 3.1, "issue_active": 0.7}, True),
    ("lg-throttle-stalls", {"stall_lg_throttle": 3.1, "issue_active": 0.7}, True),
    ("lg-throttle-stalls", {"stall_lg_throttle": 2.9, "issue_active": 0.7}, False),
    ("math-pipe-throttle", {"stall_math_pipe_throttle": 3.1}, True),   # no issue_active condition
    ("math-pipe-throttle", {"stall_math_pipe_throttle": 3.0}, False),
    ("low-issue-efficiency", {"issue_active": 0.59}, True),
    ("low-issue-efficiency", {"issue_active": 0.6}, False),
    ("tail-effect", {"waves_per_sm": 2.5}, True),
    ("tail-effect", {"waves_per_sm": 4.5}, True),     # 1/(1+4) = 0.2
    ("tail-effect", {"waves_per_sm": 5.5}, False),    # 1/6 < 0.2
    ("tail-effect", {"waves_per_sm": 3.0}, False),    # no partial wave
    ("small-grid", {"waves_per_sm": 0.5}, True),
    ("small-grid", {"grid_size": 131}, True),
    ("small-grid", {"grid_size": 132, "waves_per_sm": 1.0}, False),
    ("block-size-not-multiple-32", {"block_size": 100}, True),
    ("block-size-not-multiple-32", {"block_size": 96}, False),
    ("tensor-cores-unused", {"tensor_pipe_pct": 4.9, "fma_pipe_pct": 30.1, "matrix": True}, True),
    ("tensor-cores-unused", {"tensor_pipe_pct": 0.31, "fma_pipe_pct": 60.0, "matrix": False}, False),  # GroupNorm
    ("tensor-cores-unused", {"tensor_pipe_pct": 0.31, "fma_pipe_pct": 60.0, "matrix": None}, False),  # unknown
    ("tensor-cores-unused", {"tensor_pipe_pct": 4.9, "fma_pipe_pct": 30.0}, False),
    ("tensor-cores-unused", {"tensor_pipe_pct": 5.0, "fma_pipe_pct": 60.0}, False),
    ("wgmma-unused", {"tensor_pipe_pct": 5.0, "gmma_pct": 0.0}, True),
    ("wgmma-unused", {"tensor_pipe_pct": 5.0, "gmma_pct": 1.0}, False),
    ("low-l2-hit-rate", {"l2_hit_rate_pct": 49.9, "dram_throughput_pct": 40.0}, True),
    ("low-l2-hit-rate", {"l2_hit_rate_pct": 49.9, "dram_throughput_pct": 39.9}, False),
    ("low-l2-hit-rate", {"l2_hit_rate_pct": 50.0, "dram_throughput_pct": 70.0}, False),
    ("warp-divergence", {"thread_inst_per_inst": 27.9}, True),
    ("warp-divergence", {"thread_inst_per_inst": 28.0}, False),
    ("dram-near-peak", {"dram_throughput_pct": 80.0}, True),
    ("dram-near-peak", {"dram_throughput_pct": 79.9}, False),
    ("compute-near-peak", {"sm_throughput_pct": 80.0}, True),
    ("compute-near-peak", {"sm_throughput_pct": 79.9}, False),
    ("launch-overhead", {"duration_us": 9.9}, True),
    ("launch-overhead", {"duration_us": 10.0}, False),
]


@pytest.mark.parametrize("tag,changes,fires", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_tag_thresholds(tag, changes, fires):
    m = healthy()
    changes = dict(changes)
    matrix = changes.pop("matrix", None)
    m.update(changes)
    got = fired(m, cc="9.0", matrix=matrix)
    assert (tag in got) == fires, got
    if fires:
        s = got[tag]
        assert s["tag"] in SYMPTOMS and s["why"] and s["thresholds"] and s["source"] == "metrics"
        for key, value in changes.items():
            if key in s["metrics"]:
                assert s["metrics"][key] == value


def test_every_tag_has_a_firing_case():
    assert {c[0] for c in CASES if c[2]} | {"multi-kernel"} == set(SYMPTOMS)


def test_wgmma_only_on_sm90():
    m = healthy()
    m.update(tensor_pipe_pct=50.0, gmma_pct=0.0)
    assert "wgmma-unused" in fired(m, cc="9.0")
    assert "wgmma-unused" not in fired(m, cc="8.0")


def test_occupancy_ties_fire_each_smallest_limit():
    m = healthy()
    m.update(theoretical_occupancy_pct=50.0, occupancy_limit_registers=4, occupancy_limit_shared_mem=4)
    got = fired(m)
    assert {"occupancy-limited-registers", "occupancy-limited-smem"} <= set(got)
    assert "occupancy-limited-blocksize" not in got


def test_stall_share_falls_back_to_the_sum_of_stalls():
    m = healthy()
    m.update(warp_latency_cycles=None, issue_active=0.7)
    m["stall_barrier"] = 10.0       # 10 of (2.0 + 14 * 0.5 + 10.0) = 52%
    assert "barrier-stalls" in fired(m)


def test_null_inputs_are_not_evaluated_and_do_not_fire():
    m = healthy()
    for r in metrics.STALL_REASONS:
        m[f"stall_{r}"] = None
    m.update(issue_active=None, warp_latency_cycles=None, global_excess_sectors_pct=None,
             sectors_per_request_ld=None, sectors_per_request_st=None)
    out, not_eval = classify.symptoms(m)
    assert out == []
    text = "\n".join(not_eval)
    for tag in ("long-scoreboard-stalls", "barrier-stalls", "math-pipe-throttle", "low-issue-efficiency",
                "uncoalesced-global"):
        assert f"{tag}: not evaluated: metric" in text
    assert "issue_active" in text and "not collected" in text


def test_ncu_rule_rows_fire_mapped_tags():
    m = healthy()
    m.update(global_excess_sectors_pct=None, sectors_per_request_ld=None, sectors_per_request_st=None,
             smem_bank_conflicts_pct=None)
    rules = [{"section": "SourceCounters", "rule": "UncoalescedGlobalAccess", "type": "OPT", "text": "...",
              "est_speedup_pct": 42.5},
             {"section": "MemoryWorkloadAnalysis", "rule": "SharedMemoryConflicts", "type": "WRN", "text": "...",
              "est_speedup_pct": None}]
    got = fired(m, rules=rules)
    assert got["uncoalesced-global"]["source"] == "ncu rule UncoalescedGlobalAccess"
    assert "42.5" in got["uncoalesced-global"]["why"]
    assert got["smem-bank-conflicts"]["source"] == "ncu rule SharedMemoryConflicts"


def test_informational_rule_rows_do_not_fire():
    m = healthy()
    rules = [{"section": "SourceCounters", "rule": "UncoalescedGlobalAccess", "type": "INF", "text": "...",
              "est_speedup_pct": None}]
    assert "uncoalesced-global" not in fired(m, rules=rules)


def test_checks_cover_the_vocabulary_exactly():
    assert {c.tag for c in classify.CHECKS} | {"multi-kernel"} == set(SYMPTOMS)
    assert set(classify.RULE_TAGS.values()) <= set(SYMPTOMS)


def test_small_grid_says_which_case_fired():
    from kernel_loop.profiling.classify import _small_grid

    thr, why = _small_grid({"waves_per_sm": 0.5, "grid_size": 66, "sm_count": 132}, {})
    assert thr == {"grid_size": "< sm_count"} and "some SMs have no work" in why
    thr, why = _small_grid({"waves_per_sm": 0.97, "grid_size": 1024, "sm_count": 132}, {})  # seen on the H200
    assert thr == {"waves_per_sm": "< 1"} and "every SM has work" in why and "no work" not in why
    assert _small_grid({"waves_per_sm": 2.0, "grid_size": 1024, "sm_count": 132}, {}) is None


def test_tensor_cores_unused_says_why_it_was_not_evaluated_without_the_source():
    m = healthy()
    m.update(tensor_pipe_pct=0.31, fma_pipe_pct=60.0)
    _, not_eval = classify.symptoms(m, cc="9.0")
    assert any(n.startswith("tensor-cores-unused: not evaluated:") and "matrix" in n for n in not_eval)
    _, not_eval = classify.symptoms(m, cc="9.0", matrix=False)
    assert not any("tensor-cores-unused" in n for n in not_eval)  # evaluated: no matrix work, so no tag


def test_matrix_work_is_read_from_the_profiled_kernels_own_source():
    """A GEMM and a GroupNorm in one file: only the GEMM does matrix work (issue 44, 4)."""
    from kernel_loop.profiling.kernel_names import matrix_work

    src = (
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef gemm_kernel(a, b, c, K: tl.constexpr):\n"
        "    acc = tl.zeros((64, 64), dtype=tl.float32)\n    for k in range(0, K, 32):\n"
        "        acc += tl.dot(tl.load(a), tl.load(b))\n    tl.store(c, acc)\n\n\n"
        "@triton.jit\ndef group_norm_kernel(x, y, w, n):\n    v = tl.load(x)\n    m = tl.sum(v, 0) / n\n"
        "    d = v - m\n    tl.store(y, d * tl.rsqrt(tl.sum(d * d, 0) / n) * tl.load(w))\n\n\n"
        "def run_kernel(a, b, c):\n    out = a @ b  # not a kernel\n"
    )
    assert matrix_work("gemm_kernel_0d1d2d", src) is True
    assert matrix_work("group_norm_kernel", src) is False
    cuda = ("__global__ void mm(const float* A, const float* B, float* C, int K) {\n  float acc = 0.f;\n"
            "  for (int k = 0; k < K; ++k) { acc += A[row * K + k] * B[k * N + col]; }\n  C[0] = acc;\n}\n"
            "__global__ void rms(const float* x, float* y, int n) {\n  float s = 0.f;\n"
            "  for (int i = 0; i < n; ++i) { s += x[i] * x[i]; }\n  y[0] = s;\n}\n")
    assert matrix_work("mm(const float *, const float *, float *, int)", cuda) is True
    assert matrix_work("rms(const float *, float *, int)", cuda) is False
    # a library kernel (no body in the file): its name tells
    assert matrix_work("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", src) is True
    assert matrix_work("void at::native::vectorized_elementwise_kernel<4, ...>(int, T2, T3)", src) is False
    assert matrix_work("gemm_kernel", None) is None


def test_memory_bound_names_the_level_that_binds():
    """v0 of a GroupNorm: memory 82.5% with DRAM at 1.46%: the load was shared memory (issue 44, 5)."""
    m = {"sm_throughput_pct": 37.1, "memory_throughput_pct": 82.5, "dram_throughput_pct": 1.46,
         "l2_throughput_pct": 20.3, "l1_throughput_pct": 82.5}
    cls = classify.bottleneck(m)
    assert cls == "memory-bound" and classify.memory_level(m) == "L1/shared"
    why = classify.bottleneck_why(m, cls)
    assert "L1/shared" in why and "DRAM 1.5%" in why and "not DRAM" in why
    m.update(dram_throughput_pct=85.0, l1_throughput_pct=40.0)
    assert classify.memory_level(m) == "DRAM" and "DRAM 85.0%" in classify.bottleneck_why(m, "memory-bound")
    assert classify.memory_level({"memory_throughput_pct": 70.0}) is None  # levels not collected


def test_tail_effect_states_the_loss_the_wave_fill_implies():
    """3.88 waves: the last wave holds 88% of a full one, so it idles ~3% of the run, not 'up to 25%' (issue 44, 6)."""
    m = healthy()
    m.update(waves_per_sm=3.88, grid_size=1032, sm_count=132)
    why = fired(m)["tail-effect"]["why"]
    assert "88%" in why and "3%" in why and "25%" not in why
    m.update(waves_per_sm=1.1, grid_size=290)
    why = fired(m)["tail-effect"]["why"]
    assert "10%" in why and "45%" in why  # the last of 2 waves 10% full: 45% of the run's block slots idle
