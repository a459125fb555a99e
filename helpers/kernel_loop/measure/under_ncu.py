"""The judge's runs under ncu (mode ``profile``): the measured call in ncu's NVTX range, every call verified;
and, for a call of many kernels, the choice made from ncu's census of it (``profiling/inventory.py``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .. import proctree
from ..common import MeasuredFailure
from ..profiling import inventory, ncu_parse
from .calls import Session
from .launch import WorkerProc, import_kernel
from .problem import DataSet, Problem

NCU_WARMUP = 3  # calls under ncu before the profiled one (builds, autotuning, the allocator): each costs seconds


def ncu_run(judge: Any, worker: WorkerProc, path: Path, kind: str, prob: Problem, first: DataSet,
             sets: Any, what: str) -> dict[str, Any]:
    """One run under ncu: warm calls, then the measured call inside the NVTX range, on inputs drawn for it; every
    call verified."""
    cfg = judge.cfg
    worker.hello(cfg.impl)
    import_kernel(worker, "k", path, kind, cfg)
    nsess = Session(judge, worker, prob, {"k": (path, kind)}, first, "c" if what == "census" else "n")
    judge.mark(f"{'census' if what == 'census' else 'ncu'}_ready")
    nsess.sets = sets
    nsess.fresh = False
    warm = min(max(1, cfg.warmup), NCU_WARMUP)
    for i in range(warm + 1):
        # the measured call gets inputs no earlier call had, from a secret seed: a result remembered from the warm
        # calls, or drawn by the kernel from the run's public seed, is wrong there (its duration bounds the timed ones)
        ds = nsess.pick(True) if i < warm else prob.draw(judge.rng.randrange(1 << 30))
        r = nsess.call("k", ds, checked=True, nvtx=i == warm)
        if r["failure"]:
            raise MeasuredFailure(f"{what}: call {i + 1} of {warm + 1} is wrong: {r['failure']} (every "
                                  "call under ncu is verified, like the timed ones)")
    judge.mark(f"{'census' if what == 'census' else 'ncu'}_calls")
    rc = worker.close(wait_s=float(max(60.0, judge.deadline - time.monotonic())))
    output = "\n".join(worker.tail)
    if worker in judge.workers:
        judge.workers.remove(worker)
    proctree.end_descendants(spare=tuple(x.proc.pid for x in judge.workers if x.proc.poll() is None))
    return {"returncode": rc, "output_tail": output, "calls": warm + 1}


def census_first(judge: Any, hint: Any, ncu_worker: WorkerProc, path: Path, kind: str, prob: Problem,
                 first: DataSet, sets: Any) -> tuple[dict[str, Any] | None, WorkerProc]:
    """For a call of more kernels than the run's budget: ncu's census of every launch, then a worker for the
    detailed pass over the kernels chosen from it, in place of ``ncu_worker`` (which was started for one pass
    over every launch).  The worker's own count (``hint``) decides only whether the census runs and whether it
    reads the call's first ``budget.census`` launches only: a count it understates gets every launch its full
    sections (slow, complete) or a census of every launch, one it overstates gets the census or a sample that
    then holds every launch (fewer than the cap: not a sample).  A sample leaves the call's sums unknown."""
    spec = judge.spec
    budget = inventory.Budget.from_json(judge.cfg.ncu.budget)
    counted = hint.get("launches") if isinstance(hint, dict) and isinstance(hint.get("launches"), int) else None
    if not spec.get("census_prefix") or (counted is not None and counted <= budget.kernels):
        return None, ncu_worker
    judge.end_worker(ncu_worker)
    prefix, capped = census_capped(spec["census_prefix"], counted, budget)
    census = ncu_run(judge, judge.start_worker("census", prefix=prefix), path, kind, prob, first, sets, "census")
    judge.mark("census")
    census.update(choose(judge, spec, census, budget, capped=capped))
    census["hint_launches"] = counted
    prefix = list(spec["ncu_prefix"])
    at = prefix.index("-o")
    return census, judge.start_worker("detail", prefix=prefix[:at] + census["filter"] + prefix[at:])


def census_capped(prefix: list[str], counted: int | None, budget: inventory.Budget) -> tuple[list[str], bool]:
    """The census's ncu command for a call the worker counts ``counted`` launches of, and whether it is capped: past
    the budget's cap, ncu profiles the first ``budget.census`` launches of the measured call only (it takes about
    90 ms a launch: an LSTM's thousands took minutes on the H100)."""
    if counted is None or counted <= budget.census:
        return list(prefix), False
    at = prefix.index("-o")
    return [*prefix[:at], "--launch-count", str(budget.census), *prefix[at:]], True


def choose(judge: Any, spec: dict[str, Any], census: dict[str, Any], budget: inventory.Budget, *,
           capped: bool = False) -> dict[str, Any]:
    """Read the census (ncu's report, printed as CSV by ncu itself) and choose the kernels for the
    detailed pass; the CSV is kept where the step reads it.  A census ``capped`` at the budget's launches that read
    as many is a sample (``sampled``): the version's own kernels it did not reach get the detailed pass too."""
    report = Path(spec["census_report"])
    if census["returncode"] != 0 or not report.is_file():
        raise MeasuredFailure(f"ncu's census of the call failed (exit {census['returncode']}): "
                              + " | ".join(census["output_tail"].strip().splitlines()[-3:]))
    text = ncu_parse.import_page(spec["census_prefix"][0], report, "raw", max(60.0, judge.deadline - time.monotonic()))
    Path(spec["census_csv"]).write_text(text, encoding="utf-8")
    table = inventory.table(inventory.launches(text), list(spec.get("defined_kernels") or []))
    if not table["rows"]:
        raise MeasuredFailure("ncu's census caught no kernel in the measured call: nothing ran inside the NVTX "
                              "range (does the solution launch GPU work?)")
    chosen = inventory.choose(table, budget) or table["rows"][:1]
    sampled = capped and table["launches"] >= budget.census
    missed = inventory.unseen_own(table, list(spec.get("defined_kernels") or []))[:budget.kernels] if sampled else []
    return {"launches": table["launches"], "chosen": [r["label"] for r in chosen] + missed,
            "filter": inventory.detail_filter(chosen, missed), "sampled": sampled}
