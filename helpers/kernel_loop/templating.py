"""Jinja2 rendering of the templates in helpers/kernel_loop/templates/, with the number formats
the rendered artifacts share (``N/A`` for a null measurement, ``unknown`` for a value that the
artifacts do not hold at all)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from .common import package_dir

NA = "N/A"
UNKNOWN = "unknown"


class Missing:
    """Marks a value that should be in the artifacts but is not (rendered ``unknown``)."""

    def __repr__(self) -> str:
        return UNKNOWN


MISSING = Missing()


def dig(data: Any, *keys: Any) -> Any:
    """``data[k1][k2]...``; MISSING when a level is absent, None when a value on the way is null."""
    cur = data
    for k in keys:
        if cur is None:
            return None
        if isinstance(cur, Missing):
            return cur
        try:
            cur = cur[k]
        except (KeyError, IndexError, TypeError):
            return MISSING
    return cur


def fmt(value: Any, digits: int = 2, suffix: str = "") -> str:
    """A number for a table: ``N/A`` for None, ``unknown`` for MISSING."""
    if isinstance(value, Missing):
        return UNKNOWN
    if value is None:
        return NA
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value}{suffix}"
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 10 ** -digits):
            return f"{value:.{digits}e}{suffix}"
        return f"{value:.{digits}f}{suffix}"
    return f"{value}{suffix}"


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    """One Jinja2 environment a process: it keeps the templates it compiled (30 ms each, on every render of a fresh
    one: a sixth of a profile of the CPU test mode's judge tests)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(package_dir() / "templates")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["fmt"] = fmt
    env.globals["NA"] = NA
    env.globals["UNKNOWN"] = UNKNOWN
    return env


def render(template: str, **ctx: Any) -> str:
    return _environment().get_template(template).render(**ctx)


# --- the chart of a finished run (final_report.png) ----------------------------------------------------------
# Drawn by benchmark where it runs (matplotlib is there on the GPU machine) and by report; its PNG Description
# names what it was drawn from, so a report rendered where matplotlib is missing keeps a chart of these numbers.
CHART_TAG = "kernel-loop chart of "


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def chart_points(bench: dict[str, Any], loop: list[tuple[str, Any]], kernel: Any
                 ) -> tuple[list[str], list[float], set[str], list[dict[str, Any]], str]:
    """The chart's bars (benchmark medians, else the loop's: ``loop`` is [(version, its ncu.json event median)]),
    their sources, the baseline rows, and a digest of everything drawn."""
    import json

    from .common import sha256_text

    rows = {r["name"]: r for r in bench.get("rows") or []}
    names, times, sources = [], [], set()
    for name, loop_median in loop:
        med, source = dig(rows.get(name) or {}, "stats_us", "median"), "benchmark.json"
        if not _number(med):
            med, source = loop_median, "ncu.json timing"
        if _number(med):
            names.append(name)
            times.append(med)
            sources.add(source)
    baselines = [r for r in bench.get("rows") or [] if not r["name"].startswith("v") and r["name"] != "solution"]
    drawn = [names, times, sorted(sources), bench.get("version"), kernel,
             [[b["name"], b["available"], dig(b, "stats_us", "median")] for b in baselines]]
    return names, times, sources, baselines, sha256_text(json.dumps(drawn, sort_keys=True, default=str))[:32]


def png_description(path: Any) -> str | None:
    """The Description text chunk of a PNG file (None when there is none or it is no PNG)."""
    try:
        blob = Path(path).read_bytes()
    except OSError:
        return None
    if not blob.startswith(b"\x89PNG\r\n\x1a\n"):
        return None
    i = 8
    while i + 8 <= len(blob):
        size, kind = int.from_bytes(blob[i:i + 4], "big"), blob[i + 4:i + 8]
        body = blob[i + 8:i + 8 + size]
        if kind == b"tEXt" and body.startswith(b"Description\x00"):
            return body[len(b"Description\x00"):].decode("latin-1")
        i += 12 + size
    return None


def draw_chart(path: Any, bench: dict[str, Any], loop: list[tuple[str, Any]], kernel: Any) -> str | None:
    """Time per version (benchmark medians, else the loop's) with the baselines as horizontal lines, each bar
    labelled with its value and the best version marked; returns why it was skipped, or None (drawn, or a chart
    of these same numbers kept where matplotlib is missing)."""
    from .common import progress

    names, times, sources, baselines, digest = chart_points(bench, loop, kernel)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if png_description(path) == CHART_TAG + digest:  # drawn elsewhere from these very numbers: kept
            progress(f"matplotlib is not installed; kept {Path(path).name}, which was drawn from these same numbers")
            return None
        return "the chart was skipped because matplotlib is not installed (pip install matplotlib, or pip install .[report])"
    if not times:
        return "the chart was skipped because no version has a measured time"
    best = bench.get("version")
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    colors = ["#dd8452" if n == best else "#4c72b0" for n in names]
    bars = ax.bar(names, times, color=colors)
    for bar, t_us, n in zip(bars, times, names, strict=True):
        ax.annotate(f"{t_us:.1f}" + (" (best)" if n == best else ""), (bar.get_x() + bar.get_width() / 2, t_us),
                    ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    for i, b in enumerate(baselines):
        med = dig(b, "stats_us", "median")
        if b["available"] and _number(med):
            ax.axhline(med, linestyle="--", color=f"C{i + 2}", label=f"{b['name']} ({med:.1f} us)")
    ax.set_ylabel("median time (us, lower is better)")
    ax.set_title(f"{kernel or 'kernel'}: time per version (best: {best})", fontsize=10)
    fig.text(0.01, 0.01, "source: " + " and ".join(sorted(sources)) + " medians; baselines from benchmark.json",
             fontsize=7, color="#555555")
    if baselines:
        ax.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=120, metadata={"Description": CHART_TAG + digest})
    plt.close(fig)
    return None
