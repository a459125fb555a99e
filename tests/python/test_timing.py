"""timing.summarize (pure, CPU): percentiles, spread, bad input."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from kernel_loop import timing


def test_summarize_known_values():
    s = timing.summarize([7.0, 1.0, 10.0, 3.0, 5.0, 2.0, 9.0, 4.0, 8.0, 6.0])  # 1..10, shuffled
    assert s["n"] == 10
    assert s["median"] == pytest.approx(5.5)
    assert s["p25"] == pytest.approx(3.25) and s["p75"] == pytest.approx(7.75)
    assert s["p20"] == pytest.approx(2.8) and s["p80"] == pytest.approx(8.2)
    assert s["mean"] == pytest.approx(5.5)
    assert s["min"] == 1.0 and s["max"] == 10.0
    assert s["std"] == pytest.approx(math.sqrt(sum((x - 5.5) ** 2 for x in range(1, 11)) / 9))


def test_summarize_matches_numpy_on_random_samples():
    rng = random.Random(7)
    xs = [rng.lognormvariate(3.0, 0.4) for _ in range(257)]
    s = timing.summarize(xs)
    for q, key in ((20, "p20"), (25, "p25"), (50, "median"), (75, "p75"), (80, "p80")):
        assert s[key] == pytest.approx(np.percentile(xs, q))
    assert s["std"] == pytest.approx(np.std(xs, ddof=1))


def test_single_sample():
    s = timing.summarize([12.5])
    assert s["median"] == s["p20"] == s["p80"] == s["min"] == s["max"] == 12.5
    assert s["std"] == 0.0 and s["n"] == 1


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_summarize_rejects_bad_samples(bad):
    with pytest.raises(ValueError):
        timing.summarize(bad)
