"""Prediction lines: every form parses, bad ones are refused, and scoring says held / missed / unknown."""

from __future__ import annotations

import pytest
from kernel_loop import predictions as P
from kernel_loop.common import UsageError

KEYS = {"duration_us", "event_median_us", "registers_per_thread", "achieved_occupancy_pct", "dram_throughput_pct"}


@pytest.mark.parametrize("line, op, value", [
    ("duration: -15%", "rel", -15.0),
    ("duration_us: +2.5%", "rel", 2.5),
    ("registers_per_thread: -8", "abs", -8.0),
    ("achieved_occupancy_pct: +12.5", "abs", 12.5),
    ("registers_per_thread: <= 64", "<=", 64.0),
    ("achieved_occupancy_pct: >= 70%", ">=", 70.0),
    ("dram_throughput_pct: < 90", "<", 90.0),
    ("dram_throughput_pct:>1e1", ">", 10.0),
    ("registers_per_thread: = 40", "=", 40.0),
])
def test_every_form_parses_and_round_trips(line, op, value):
    p = P.parse_line(line, KEYS)
    assert (p["op"], p["value"]) == (op, value)
    again = P.parse_line(p["text"], KEYS)
    assert (again["metric"], again["op"], again["value"]) == (p["metric"], op, value)


@pytest.mark.parametrize("line", [
    "duration -15%", "duration: 15%", "duration: faster", "duration: <= ", "duration: -15%%",
    "duration: ~5", ": -5%", "duration: >= 5 us",
])
def test_malformed_lines_name_the_allowed_forms(line):
    with pytest.raises(UsageError, match="allowed forms"):
        P.parse_line(line, KEYS)


def test_unknown_metric_lists_the_known_keys():
    with pytest.raises(UsageError, match="unknown metric 'sm_efficiency'.*registers_per_thread"):
        P.parse_line("sm_efficiency: +5%", KEYS)
    assert P.parse_line("sm_efficiency: +5%")["metric"] == "sm_efficiency"  # no validation without keys


def test_parse_lines_skips_blank_lines_and_stops_at_the_first_bad_one():
    assert len(P.parse_lines(["duration: -5%", "  ", "registers_per_thread: <= 64"], KEYS)) == 2
    with pytest.raises(UsageError):
        P.parse_lines(["duration: -5%", "nonsense"], KEYS)


def test_duration_prefers_the_event_median():
    assert P.metric_value({"event_median_us": 82.4, "duration_us": 83.55}, "duration") == 82.4
    assert P.metric_value({"event_median_us": None, "duration_us": 83.55}, "duration") == 83.55
    assert P.metric_value(None, "duration") is None


BEFORE = {"event_median_us": 84.896, "duration_us": 86.016, "registers_per_thread": 55,
          "achieved_occupancy_pct": 53.03, "dram_throughput_pct": 85.57}
AFTER = {"event_median_us": 83.05, "duration_us": 84.30, "registers_per_thread": 40,
         "achieved_occupancy_pct": 86.4, "dram_throughput_pct": None}


@pytest.mark.parametrize("line, status", [
    ("duration: -2%", "held"),          # -2.17 %
    ("duration: -3%", "missed"),
    ("duration: +1%", "missed"),
    ("registers_per_thread: -15", "held"),
    ("registers_per_thread: -16", "missed"),
    ("achieved_occupancy_pct: +30", "held"),
    ("registers_per_thread: <= 40", "held"),
    ("registers_per_thread: < 40", "missed"),
    ("achieved_occupancy_pct: >= 90", "missed"),
    ("achieved_occupancy_pct: > 86", "held"),
    ("registers_per_thread: = 40", "held"),
    ("registers_per_thread: = 41", "missed"),
    ("dram_throughput_pct: >= 80", "unknown"),   # not collected on the next version
    ("dram_throughput_pct: -5%", "unknown"),
])
def test_scoring(line, status):
    s = P.score(P.parse_line(line), BEFORE, AFTER)
    assert s["status"] == status
    if status == "unknown":
        assert s["why"]


def test_scoring_reports_the_change_and_unknown_base():
    s = P.score(P.parse_line("duration: -2%"), BEFORE, AFTER)
    assert s["before"] == 84.896 and s["after"] == 83.05
    assert s["change"] == pytest.approx((83.05 - 84.896) / 84.896 * 100)
    missing_before = P.score(P.parse_line("registers_per_thread: -4"), {"registers_per_thread": None}, AFTER)
    assert missing_before["status"] == "unknown" and "this version" in missing_before["why"]
    zero = P.score(P.parse_line("registers_per_thread: -4%"), {"registers_per_thread": 0}, AFTER)
    assert zero["status"] == "unknown" and "zero" in zero["why"]
    # a bound needs only the next version's value
    assert P.score(P.parse_line("registers_per_thread: <= 48"), None, AFTER)["status"] == "held"


@pytest.mark.parametrize("line", ["duration: -300%", "duration: -100%", "registers_per_thread: -100.0%"])
def test_a_fall_of_100_percent_or_more_is_refused(line):
    """No measured value falls by 100% or more (issue 44, 13)."""
    with pytest.raises(UsageError, match="cannot fall by 100% or more"):
        P.parse_line(line, KEYS)
    assert P.parse_line("duration: -99.5%", KEYS)["value"] == -99.5
    assert P.parse_line("duration: +300%", KEYS)["value"] == 300.0


def test_caveats_name_the_predictions_that_cannot_be_compared():
    assert "per issued instruction" in P.caveat(P.parse_line("stall_barrier: -10%"))
    assert "per issued instruction" in P.caveat(P.parse_line("warp_latency_cycles: < 20"))
    assert "no shared memory" in P.caveat(P.parse_line("smem_bank_conflicts_pct: <= 1"))
    assert P.caveat(P.parse_line("duration: -10%")) is None
    assert P.caveat(P.parse_line("dram_throughput_pct: >= 80")) is None


# --- predictions that name a kernel (programs of many kernels, ncu.json schema 2) ----------------------------------
def _block(kernels, median=900.0):
    import runfixture as rf

    return rf.schema2_ncu({"schema": 1}, kernels, median)


def test_a_kernel_prefix_parses_resolves_and_round_trips():
    import runfixture as rf

    recs = P.kernel_records(_block(rf.BLOCK_V0))
    assert list(recs)[:2] == ["attn_fwd", rf.GEMM]  # largest time first
    p = P.parse_line("attn:registers_per_thread: <= 128", kernels=recs)
    assert (p["kernel"], p["metric"], p["op"], p["value"]) == ("attn_fwd", "registers_per_thread", "<=", 128.0)
    assert p["text"] == "attn_fwd:registers_per_thread: <= 128" and p["kernel_name"] == "attn_fwd"
    again = P.parse_line(p["text"])
    assert {k: again[k] for k in ("kernel", "metric", "op", "value", "text")} == {
        k: p[k] for k in ("kernel", "metric", "op", "value", "text")}
    # a substring resolves when it is in one label only; '#N' names the second kernel of a base
    assert P.parse_line("layer_norm:dram_throughput_pct: -5", kernels=recs)["kernel"] == "vectorized_layer_norm_kernel"
    gelu = P.parse_line("vectorized_elementwise_kernel#2:time_us: -20%", kernels=recs)
    assert gelu["kernel"] == "vectorized_elementwise_kernel#2" and gelu["kernel_name"] == rf.GELU
    assert P.parse_line("duration: -5%", kernels=recs)["kernel"] is None


@pytest.mark.parametrize("line, msg", [
    ("vectorized:time_us: -5%", "matches 3 labels (vectorized_layer_norm_kernel, vectorized_elementwise_kernel, "
                                "vectorized_elementwise_kernel#2): write the whole label"),
    ("softmax:time_us: -5%", "matches no kernel label of this version: use one of attn_fwd, sm90_xmma_gemm"),
    ("attn_fwd:sm_efficiency: +5", "unknown metric 'sm_efficiency' in prediction 'attn_fwd:sm_efficiency: +5': attn_fwd has"),
    ("vectorized_elementwise_kernel#2:registers_per_thread: <= 32", "not profiled (outside the ncu budget)"),
    ("attn_fwd:event_median_us: -5%", "event_median_us is the whole call's time"),
    ("attn-fwd:duration: -5%", "allowed forms"),
])
def test_a_kernel_name_that_resolves_to_no_single_label_is_refused_in_one_line(line, msg):
    import runfixture as rf

    with pytest.raises(UsageError) as exc:
        P.parse_line(line, KEYS, P.kernel_records(_block(rf.BLOCK_V0)))
    assert msg in str(exc.value) and "\n" not in str(exc.value)


def test_schema1_labels_sums_and_focus():
    """A schema-1 file has no labels: they come from its names; duration is already summed, DRAM bytes are summed
    here, and the focus is the longest launch's kernel."""
    ncu = {"kernels": [{"name": "k_a", "metrics": {"duration_us": 5.0, "dram_bytes_read": 10.0, "registers_per_thread": 40}},
                       {"name": "k_b", "metrics": {"duration_us": 7.0, "dram_bytes_read": 20.0, "registers_per_thread": 90}},
                       {"name": "k_a", "metrics": {"duration_us": 6.0, "dram_bytes_read": 11.0, "registers_per_thread": 41}}],
           "metrics": {"duration_us": 18.0, "dram_bytes_read": 20.0, "registers_per_thread": 90, "event_median_us": 19.0}}
    recs = P.kernel_records(ncu)
    assert [(r["label"], r["launches"], r["time_us"], r["metrics"]["registers_per_thread"]) for r in recs.values()] == [
        ("k_a", 2, 11.0, 41), ("k_b", 1, 7.0, 90)]
    assert recs["k_a"]["share"] == pytest.approx(11 / 18)
    assert P.focus_record(ncu)["label"] == "k_b"
    assert P.solution_sums(ncu)["dram_bytes_read"] == 41.0 and P.solution_value(ncu, "duration") == 19.0


def test_scoring_a_named_kernel_a_fused_kernel_and_a_renumbered_label():
    import runfixture as rf

    v0, v1 = _block(rf.BLOCK_V0, 900.0), _block(rf.BLOCK_V1, 850.0)
    recs = P.kernel_records(v0)

    def s(line):
        return P.score_versions(P.parse_line(line, kernels=recs), v0, v1, ("v0", "v1"))

    regs = s("attn:registers_per_thread: <= 128")
    assert (regs["status"], regs["before"], regs["after"], regs["on"]) == (
        "held", 168, 128, {"before": "attn_fwd", "after": "attn_fwd"})
    assert s("attn_fwd:time_us: -10%")["status"] == "missed"  # 400 -> 380 us: -5 %
    # the add was fused away: its time and DRAM bytes are 0, its other metrics unknown, each saying why
    gone = s("vectorized_elementwise_kernel:time_us: -50%")
    assert (gone["status"], gone["before"], gone["after"]) == ("held", 60.0, 0.0)
    assert gone["note"] == "vectorized_elementwise_kernel is not launched in v1 (removed or fused): its time_us is 0"
    assert s("vectorized_elementwise_kernel:dram_bytes_write: <= 0")["status"] == "held"
    pct = s("vectorized_elementwise_kernel:dram_throughput_pct: <= 10")
    assert pct["status"] == "unknown" and pct["why"] == (
        "vectorized_elementwise_kernel is not launched in v1 (removed or fused): it has no dram_throughput_pct")
    # with the add gone, the GELU is labelled vectorized_elementwise_kernel in v1: found by its name, not its label
    gelu = s("vectorized_elementwise_kernel#2:launches: = 1")
    assert gelu["status"] == "held" and gelu["on"] == {"before": "vectorized_elementwise_kernel#2",
                                                       "after": "vectorized_elementwise_kernel"}
    assert "(same kernel name)" in gelu["note"]
    # without the stored name (a hand-written line), the earlier version's name under the label finds it too
    bare = P.parse_line("vectorized_elementwise_kernel#2:time_us: <= 40")
    assert P.score_versions(bare, v0, v1)["on"]["after"] == "vectorized_elementwise_kernel"
    # an unprofiled kernel has its time but no KEYs
    gelu_regs = P.score_versions({**bare, "metric": "registers_per_thread"}, v0, v1, ("v0", "v1"))
    assert gelu_regs["status"] == "unknown" and "not profiled" in gelu_regs["why"]
    # unprefixed: the call's sums for duration and DRAM bytes, the focus kernel's for other KEYs
    dur = s("duration: -5%")
    assert (dur["before"], dur["after"], dur["on"]) == (900.0, 850.0, None)
    assert s("dram_bytes_write: -10%")["before"] == 4.0e6 + 2.0e6 + 1.0e6 * 2 + 2.0e6  # every launch of every kernel
    assert s("registers_per_thread: <= 128")["on"] == {"before": "attn_fwd", "after": "attn_fwd"}


def test_an_unprefixed_metric_stays_on_the_kernel_it_was_made_on_when_the_focus_changes():
    """Scored on the earlier version's focus kernel, never silently across two kernels."""
    import runfixture as rf

    v0 = _block(rf.BLOCK_V0)
    # v1: a second own kernel now takes more time than attn_fwd, so it is v1's focus
    extra = rf.kernel_spec("rope_fwd", "own", 1, 500.0, {"registers_per_thread": 40}, [], "memory-bound")
    v1 = _block([*rf.BLOCK_V1, extra])
    assert v1["focus"]["label"] == "rope_fwd"
    s = P.score_versions(P.parse_line("registers_per_thread: <= 128"), v0, v1, ("v0", "v1"))
    assert (s["status"], s["before"], s["after"]) == ("held", 168, 128)
    assert s["note"] == "scored on attn_fwd, the focus kernel of v0; the focus of v1 is rope_fwd"
    # attn_fwd rewritten as another own kernel: the focus that replaced it is scored, and the note says so
    rewritten = [rf.BLOCK_V1[0], rf.kernel_spec("attn_fwd_v2", "own", 1, 300.0, {"registers_per_thread": 96}, [],
                                                "memory-bound"), rf.BLOCK_V1[2]]
    s = P.score_versions(P.parse_line("registers_per_thread: <= 128"), v0, _block(rewritten), ("v0", "v1"))
    assert (s["status"], s["after"]) == ("held", 96) and "scored on attn_fwd_v2" in s["note"]
    # the own kernel gone and a library kernel the focus: different kernels, so unknown, naming both
    library_only = [rf.BLOCK_V1[0], rf.BLOCK_V1[2]]
    s = P.score_versions(P.parse_line("registers_per_thread: <= 128"), v0, _block(library_only), ("v0", "v1"))
    assert s["status"] == "unknown" and s["why"] == (
        f"the focus kernel changed from attn_fwd (own) to {rf.GEMM} (library) and attn_fwd is not launched in v1: "
        "name the kernel ('<label>:registers_per_thread: ...')")
    # one kernel per version (schema 1, the bundled examples): a rewritten kernel is compared, with no note
    one = {"kernels": [{"name": "k_old", "metrics": {"duration_us": 9.0, "registers_per_thread": 60}}],
           "metrics": {"duration_us": 9.0, "registers_per_thread": 60}}
    two = {"kernels": [{"name": "k_new", "metrics": {"duration_us": 8.0, "registers_per_thread": 50}}],
           "metrics": {"duration_us": 8.0, "registers_per_thread": 50}}
    s = P.score_versions(P.parse_line("registers_per_thread: -10"), one, two)
    assert (s["status"], s["note"], s["why"]) == ("held", None, None)


@pytest.mark.parametrize("line, measured, msg", [
    ("duration: >= 0", 50.0, "cannot fail"), ("duration: > -1", 50.0, "cannot fail"),
    ("duration: <= -5", 50.0, "cannot hold"), ("registers_per_thread: < 0", None, "cannot hold"),
    ("registers_per_thread: = -1", None, "cannot hold"), ("dram_throughput_pct: <= 100", None, "cannot fail"),
    ("dram_throughput_pct: < 101", None, "cannot fail"), ("dram_throughput_pct: >= 1e3", None, "cannot hold"),
    ("dram_throughput_pct: +1e3", None, "more than 100 points"), ("sm_throughput_pct: -150", None, "100 points"),
    ("duration: < 99999999", 50.0, "more than 10x above this version's measured duration of 50 us"),
    ("event_median_us: <= 1", 50.0, "10x below"), ("duration: -60", 50.0, "10x below"),
])
def test_a_prediction_that_cannot_fail_or_cannot_hold_is_named(line, measured, msg):
    assert msg in P.senseless(P.parse_line(line), measured)


@pytest.mark.parametrize("line", ["duration: -0%", "duration: +0%", "duration: +0", "duration: <= 40",
                                  "achieved_occupancy_pct: > 0", "registers_per_thread: <= 0", "dram_throughput_pct: < 100",
                                  "dram_throughput_pct: +100", "dram_throughput_pct: = 100", "duration: -95%",
                                  "attn:duration: <= 1"])
def test_predictions_that_can_fail_and_hold_pass(line):
    assert P.senseless(P.parse_line(line), 50.0) is None


def test_a_prediction_scored_across_two_gpus_says_so():
    """An agent's trial was offered an H200 for v1 after v0 ran on an H100: a prediction scored across them compares
    two cards.  The score keeps its status and says so in its note, beside any other note."""
    import runfixture as rf

    v0, v1 = _block(rf.BLOCK_V0), _block(rf.BLOCK_V1)
    same = P.score_versions(P.parse_line("duration: -5%"), v0, v1, ("v0", "v1"))
    assert same["note"] is None
    v0["gpu"], v1["gpu"] = {"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA H200"}
    s = P.score_versions(P.parse_line("duration: -5%"), v0, v1, ("v0", "v1"))
    assert s["status"] == same["status"] and s["note"] == (
        "measured on different GPUs (NVIDIA H100 80GB HBM3 in v0, NVIDIA H200 in v1)")
    v1["gpu"] = {"name": "NVIDIA H100 80GB HBM3"}
    assert P.score_versions(P.parse_line("duration: -5%"), v0, v1, ("v0", "v1"))["note"] is None
