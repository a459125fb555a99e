"""The checker: the process that judges a kernel's outputs and never imports the kernel file.

``runner`` starts it next to the kernel's process for every measurement that checks outputs
(correctness, the timing run's after-timing check, the benchmark's checks).  For each check the
parent listed (tag, kernel, dims, seed), in order, it draws the seeded inputs itself
(``loader.load_case(..., with_kernel=False)``: ref.py only), runs the reference on them, then reads
the kernel's manifest (``handoff``) and compares:

- every output, with ``compare.compare_outputs`` (the run's tolerances);
- every tensor input that is not an output, byte for byte against its own copy of the input: a
  kernel that changed its inputs fails, naming the input;
- no output may lie inside an input's storage (a view of it).

So a kernel that patches torch, the comparison or the clock when it is imported changes nothing
here: this interpreter never ran its code.  The reference itself must leave its inputs as they
were (``BadReference`` otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import handoff
from .compare import changed_input_row, compare_outputs
from .tensors import is_tensor, same_bytes


def _alias_rows(doc: dict[str, Any], rows: list[dict]) -> None:
    """An output whose bytes lie inside a (non-output) input's storage fails: it is a view of that input."""
    spans = {n: e.get("range") for n, e in doc.get("inputs", {}).items() if e.get("range")}
    for row in rows:
        out = doc.get("outputs", {}).get(row["name"])
        if not out or not out.get("range") or not row["passed"]:
            continue
        start = int(out["range"][0])
        for name, (lo, size) in spans.items():
            if int(lo) <= start < int(lo) + max(int(size), 1):
                row.update(passed=False, note=f"output '{row['name']}' shares memory with the input '{name}' "
                           "(a view of it): the kernel must write its own result")
                break


def judge(case, expected: dict, doc: dict[str, Any], folder: str, tolerance: dict | None, ref: Any):
    """(rows, warnings) of one manifest against the checker's own case and reference outputs."""
    got: dict[str, Any] = dict(doc.get("values") or {})
    for name, entry in (doc.get("outputs") or {}).items():
        got[name] = handoff.open_tensor(folder, entry)
    rows, warns = compare_outputs(got, expected, tolerance, ref)
    handed = doc.get("inputs") or {}
    for name, own in case.inputs.items():
        if not is_tensor(own) or name in case.outputs:
            continue
        if name not in handed:
            rows.append(dict(changed_input_row(name, own), note=f"the kernel's process did not hand over input '{name}'"))
            continue
        theirs = handoff.open_tensor(folder, handed[name])
        if not same_bytes(theirs, own):
            rows.append(changed_input_row(name, own))
        del theirs
    _alias_rows(doc, rows)
    del got
    return rows, warns


def check(spec: dict[str, Any]) -> dict[str, Any]:
    """Every check of ``spec["checks"]`` in order: {"checks": [{tag, rows, warnings} or {tag, error}]}."""
    import torch

    from . import loader
    from .trials import BadReference, setup_child, sync

    cfg, device, ref = setup_child(spec)
    root, folder = Path(spec["run_root"]), spec["handoff_dir"]
    timeout = float(spec.get("timeout_s", 600))
    out: list[dict[str, Any]] = []
    result: dict[str, Any] = {"checks": out}
    held: tuple | None = None  # (key, case, expected): consecutive checks on the same inputs share them
    for n, item in enumerate(spec["checks"]):
        key = (item["kernel"], json.dumps(item["dims"], sort_keys=True), int(item["seed"]))
        if held is None or held[0] != key:
            held = None  # the previous inputs go before new ones are drawn
            case = loader.load_case(cfg, root, Path(item["kernel"]), item["dims"], int(item["seed"]), device,
                                    with_kernel=False)
            snapshot = case.input_snapshot()
            held = (key, case, case.reference(in_place=True))
            sync(device)
            changed = case.changed_inputs(snapshot)
            if changed:
                raise BadReference(f"ref.py's reference changed its input {changed[0]!r}: the kernel would get "
                                   "modified inputs; make the reference work on copies")
            del case
        _, case, expected = held
        try:
            doc = handoff.wait_manifest(folder, n, timeout)
        except handoff.KernelEnded:
            break
        if doc.get("tag") != item["tag"]:
            handoff.ack(folder, n)
            raise RuntimeError(f"check {n}: the kernel's process handed over '{doc.get('tag')}', "
                               f"expected '{item['tag']}'")
        if doc.get("error"):
            out.append({"tag": item["tag"], "error": doc["error"]})
            handoff.ack(folder, n)
            break
        rows, warns = judge(case, expected, doc, folder, spec.get("tolerance", cfg.tolerance), ref)
        sync(device)
        handoff.ack(folder, n)
        out.append({"tag": item["tag"], "rows": rows, "warnings": warns})
        del case, expected
        if device.startswith("cuda"):
            torch.cuda.ipc_collect()
    return result
