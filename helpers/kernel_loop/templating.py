"""Jinja2 rendering of the templates in helpers/kernel_loop/templates/, with the number formats
the rendered artifacts share (``N/A`` for a null measurement, ``unknown`` for a value that the
artifacts do not hold at all)."""

from __future__ import annotations

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


def render(template: str, **ctx: Any) -> str:
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
    return env.get_template(template).render(**ctx)
