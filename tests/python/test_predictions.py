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
