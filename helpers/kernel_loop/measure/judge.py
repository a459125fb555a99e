"""The judge: the trusted side of a measurement.  It never imports the kernel file.

``python -m kernel_loop.measure.judge SPEC.json`` (started by ``session``) reads the step's spec, imports ref.py,
draws the model parameters from the run's seed and every input from secret ones (``problem``), allocates every buffer
the kernel reads or writes, and starts the workers that call the kernel (``worker``) over a socket. For every call,
warmup, timed or profiled alike, the judge

1. puts a data set into the shared input buffers: a fresh draw for every call when drawing is cheap, else one
   of two sets with different values, chosen at random (calls.Session.prepare_sets);
2. poisons every output buffer (NaN and a finite sentinel, alternating);
3. asks for the call; the worker replies with its event time;
4. screens the outputs for poison left behind, and on the calls it chose in secret beforehand (the first and the last
   of every timed loop, each other timed call with a chance of its own, at least 4 of them, and every call under ncu)
   verifies them fully against the reference, checks the inputs are as drawn, and refuses outputs that are expanded or
   views of an input where the reference's are not; two in three of a timed loop's verified calls between its first
   and last draw inputs moved to another range (conditions.py).

Modes (``spec["mode"]``): ``correctness`` (every shape and trial), ``profile`` (the timing loop, then the run under
ncu, both verified), ``benchmark`` (every version timed in the same rounds of one worker, the A/B transitions read
from them, then the baselines in a worker that imports no kernel). The result is written to ``spec["result_path"]``:
``error`` is None on success, else the failure as text (``usage`` true for bad input). The judge is the subreaper of
its workers: a process a kernel starts is ended with its worker, before anything else is timed."""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from itertools import chain
from pathlib import Path
from typing import Any

from .. import proctree, records
from ..common import MeasuredFailure, UsageError, progress, sha256_text, write_json
from ..compare import CONSTANT_REFERENCE, applied_tolerances
from ..config import RunConfig
from ..tensors import is_tensor
from . import guards, libraries, protocol
from . import held as hold
from .calls import Session, bad_row
from .conditions import CONDITION_WORDS, condition, condition_plan, free_cached, other_plan
from .launch import KernelFailed, Started, WorkerProc, import_kernel, prebuild, start
from .problem import DataSet, Problem, flashinfer_missing, import_ref, kernel_kind
from .timed import budgeted_rounds, harness_hint, timed_loop, timing_block
from .under_ncu import census_first, ncu_run

PROGRESS_S = float(os.environ.get("KERNEL_LOOP_PROGRESS_S") or 15.0)  # a progress line when a shape's calls take longer
_T0 = time.monotonic()          # the judge's start: the phases of a step are counted from it


def _at() -> str:
    """Where a long step stands, for its progress lines: seconds since the judge started."""
    return f" (at {time.monotonic() - _T0:.1f} s)"


def derive_seed(run_seed: int, shape_index: int, trial: int, salt: int = 0) -> int:
    """A trial's seed, hashed with the judge's 128-bit salt: one the worker is sent tells no other, nor the salt."""
    return int(sha256_text(f"{run_seed}:{shape_index}:{trial}:{salt}")[:12], 16)  # 48 bits: room for offsets


# --- the judge ---------------------------------------------------------------------------------
class Judge:
    def __init__(self, spec: dict[str, Any], started: Started):
        import torch

        self.torch, self.spec, self.cfg = torch, spec, RunConfig.from_json(spec["cfg"])
        self.device, self.run_root, self.deadline = spec["device"], Path(spec["run_root"]), started.deadline
        self.rng = random.SystemRandom()
        self.salt = self.rng.getrandbits(128)  # no correctness seed a kernel could draw and memoize at import
        self._tmp, self._worker_tmp, self.folder, self._fresh = started.tmp, started.worker_tmp, started.folder, []
        self.workers: list[WorkerProc] = list(started.workers.values())
        self.seen: list[WorkerProc] = list(self.workers)  # every worker of the step, for what its sandbox said
        self._early = dict(started.workers)
        self.use_file = os.environ.get(protocol.TRANSPORT_ENV) == "file" or not self.device.startswith("cuda")
        if self.device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise UsageError(f"no CUDA GPU visible: torch.cuda.is_available() is False (torch {torch.__version__}, "
                                 f"CUDA build {torch.version.cuda}); this run measures on {self.device}: run it on "
                                 "the machine with the run's GPU (a CPU result never counts for a GPU run)")
            index = torch.device(self.device).index or 0
            if index >= torch.cuda.device_count():
                raise UsageError(f"run.json gpu {index} does not exist: {torch.cuda.device_count()} GPU(s) visible")
            torch.cuda.set_device(torch.device(self.device))
            if spec.get("card") not in (None, "-", torch.cuda.get_device_name(index)):  # the gate fails it: said first
                raise UsageError(records.another_card(spec["card"], torch.cuda.get_device_name(index), self.device))
        self.ref = import_ref(self.run_root)
        self.tolerance = spec.get("tolerance", self.cfg.tolerance)
        self._problems: dict[tuple, Problem] = {}
        self.phases: dict[str, float] = {"ready": round(time.monotonic() - _T0, 2)}

    def mark(self, phase: str) -> None:
        """Seconds from the judge's start to the end of ``phase`` (reported with the result)."""
        self.phases[phase] = round(time.monotonic() - _T0, 2)

    def close(self) -> None:
        for w in self.workers:
            w.kill()
        proctree.end_descendants()
        for t in (self._tmp, *self._fresh):
            t.cleanup()
        shutil.rmtree(self._worker_tmp, ignore_errors=True)

    def problem(self, dims: dict, kernel: Path) -> Problem:
        kind = kernel_kind(kernel, self.ref)
        key = (json.dumps(dims, sort_keys=True), kind, str(kernel) if kind == "cu" else "")
        if key not in self._problems:
            text = Path(kernel).read_text(encoding="utf-8", errors="replace") if kind == "cu" else None
            self._problems[key] = Problem(self.cfg, self.ref, dims, self.device, kind, text)
        return self._problems[key]

    def start_worker(self, name: str, *, prefix: list[str] | None = None, env: dict | None = None,
                     own_caches: bool = False) -> WorkerProc:
        """A worker over a socket in the judge's folder, where its shared buffers live too; with ``own_caches``
        (the baselines) every folder it reads and writes is made now: its socket's and buffers' folder, its
        temporary and cache folders (see ``launch.start``), so nothing a kernel's worker left can be there."""
        if name in self._early:  # started before the judge imported torch: their imports overlapped
            return self._early.pop(name)
        folder = self.folder
        if own_caches:
            self._fresh.append(protocol.private_dir("kl-base-", self.spec.get("scratch")))
            folder = Path(self._fresh[-1].name)
        w = start(folder, name, self.spec, deadline=self.deadline, prefix=prefix, env=env,
                  tmpdir=self._worker_tmp, own_caches=own_caches)
        self.workers.append(w)
        self.seen.append(w)
        return w

    def isolation(self) -> dict[str, Any]:
        """Whether every worker that ran code of the user's was sandboxed (sandbox.py), and how or why not."""
        said = [w.isolated for w in self.seen if w.isolated is not None]
        if not said:
            return {"worker_isolated": False, "isolation_why": "no worker started"}
        bad = [why for ok, why in said if not ok]
        return {"worker_isolated": not bad, "isolation_why": bad[0] if bad else said[0][1]}

    def end_worker(self, w: WorkerProc) -> None:
        """End a worker and everything it started, before anything else is measured."""
        w.close()
        if w in self.workers:
            self.workers.remove(w)
        # what it started ends with it; the workers still wanted (the ncu run waiting its turn) are spared
        proctree.end_descendants(spare=tuple(x.proc.pid for x in self.workers if x.proc.poll() is None))

    def own_pids(self) -> set[int]:
        return {os.getpid(), *[w.proc.pid for w in self.workers], *proctree.descendants()}

    def check_gpu_is_ours(self, what: str) -> dict[str, Any]:
        """Refuse to time while another process computes on the GPU; says whether NVML could tell."""
        from .. import gpustate

        if not self.device.startswith("cuda"):
            return {"checked": False, "why": "cpu test mode"}
        index = self.torch.device(self.device).index or 0
        procs = gpustate.compute_processes(index, self._uuid())
        if procs is None:
            return {"checked": False, "why": "NVML (nvidia-ml-py) is not available"}
        foreign = gpustate.foreign_processes(procs, self.own_pids(),
                                             1 + sum(w.proc.poll() is None for w in self.workers))
        if foreign:
            raise UsageError(gpustate.not_alone(foreign[0], what, os.getppid()))
        return {"checked": True, "processes": len(procs)}

    def _uuid(self) -> str | None:
        props = self.torch.cuda.get_device_properties(self.torch.device(self.device))
        return str(getattr(props, "uuid", "") or "") or None

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device) if self.device.startswith("cuda") else None

    def gpu_info(self) -> dict[str, Any] | None:
        if not self.device.startswith("cuda"):
            return None
        props = self.torch.cuda.get_device_properties(self.torch.device(self.device))
        return {"name": props.name, "cc": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count}


# --- modes -------------------------------------------------------------------------------------
def _kernel_entry(judge: Judge, path: Path) -> tuple[Path, str]:
    from .. import loader

    loader.check_runs_on(path, judge.device)
    return path, kernel_kind(path, judge.ref)


def correctness(judge: Judge) -> dict[str, Any]:
    """Every shape x trial: fresh seeded inputs, one call, every output and input verified."""
    path, kind = _kernel_entry(judge, Path(judge.spec["kernel"]))
    shapes: list[dict] = []
    gpu = judge.gpu_info()
    result: dict[str, Any] = {"device": judge.device, "shapes": shapes, "warnings": [], "error": None, "build": None,
                              "gpu_name": gpu["name"] if gpu else None}
    worker = judge.start_worker("kernel")
    try:  # the worker leaves in order (a wrapper such as compute-sanitizer writes its summary at its exit)
        _correctness(judge, worker, path, kind, result)
    except (MeasuredFailure, UsageError):  # the kernel's failure, a usage error: said as they are (main)
        raise
    except Exception as exc:  # the judge's own failure (out of device memory): the shapes so far stay, and where
        result["error"] = hold.judge_failed_at(exc, shapes, judge.device)
    finally:
        judge.end_worker(worker)
    result["libraries"] = libraries.keep(worker.built, judge.spec.get("keep_libraries"),  # for the later steps,
                                         [records.key_path(), Path(judge.spec["run_root"])])  # the worker ended
    result.update(judge.isolation())
    return result


def _correctness(judge: Judge, worker, path: Path, kind: str, result: dict[str, Any]) -> None:
    spec, cfg = judge.spec, judge.cfg
    kernel = Path(spec["kernel"])
    shapes = result["shapes"]
    worker.hello(cfg.impl)
    imp = import_kernel(worker, "k", path, kind, cfg)
    result["build"] = imp.get("build")
    result["conditions"] = CONDITION_WORDS
    watched, prob = [], None  # results a compile cache kept (held.after_the_calls), read after every later shape
    for si, dims in enumerate(chain(spec["shapes"], hold.other_batches(cfg, shapes, judge.device))):
        own = si >= len(spec["shapes"])  # another batch size (held.other_batches): a short plan; a refusal is noted,
        back, trials, notes = own and dims == spec["shapes"][0], [], []  # and so is a Model that cannot run there;
        unfit = (Exception,) if own and not back else ()  # at the run's batch size again (back), neither
        shapes.append({"dims": dims, "trials": trials, "notes": notes, **({"own": True} if own else {})})
        sess = earlier = first = plan = after = None  # the previous call's data set ("stale" pre-state), its rng's end
        ring = False  # (held.holding)
        if (prob := hold.problem_at(judge, dims, kernel, notes, unfit, prob)) is None:
            continue
        held: list[dict] = []  # per call, the fingerprints of what it returned (kept by the caller or followed)
        keep, kept, checks, cont, t = set(), set(), set(), set(), 0  # the calls that keep results; the trials that did
        said_at = time.monotonic()
        while plan is None or t < len(plan):
            if plan and time.monotonic() - said_at > PROGRESS_S:  # a long shape (large inputs, the CPU): say where
                said_at = time.monotonic()
                progress(f"shape {si + 1}{'' if own else ' of ' + str(len(spec['shapes']))}: call {t + 1} of {len(plan)}{_at()}")
            seed = derive_seed(cfg.seed, si, t, judge.salt)
            try:
                ds = prob.draw(seed, start=after if t in cont else None, reference=not hold.lean_draw(first, plan, t, prob))
            except unfit as exc:  # that cannot run there (a view of a fixed size)
                hold.cannot_run(notes, exc)
                break
            if sess is None:
                sess, first = Session(judge, worker, prob, {"k": (path, kind)}, ds, f"s{si}", keep=True, watch=watched), ds
                plan = other_plan(judge.rng, back, prob, spec["shapes"][0]) if own else condition_plan(judge.rng, ds, prob, int(spec["trials"]))
                keep, checks = hold.calls_to_keep(judge.rng, len(plan), ds, judge.device, notes)
                cont = hold.continue_plan(judge.rng, plan, prob, notes)
                notes += hold.shape_notes(sess, prob)
            cond, said, ds = condition(judge.tolerance, prob, first, ds, plan[t], earlier, seed, notes)
            hold.cycle_rings(sess, len(plan), notes) if ring else None  # after the quiet call before it
            ring = hold.holding(sess, len(plan), t)  # the last call but one: quiet, its results kept, the probe next
            cond.keep = t in keep or cond.strided == "moved" or ring  # a moved call's handed outputs: kept by the caller
            free_cached()
            r = sess.call("k", ds, checked=True, cond=cond, quiet=ring)
            if r.get("raised") and (cond.strided not in (None, "moved") or cond.weights or bool(unfit)) and hold.refusal(r["raised"]):
                plan += hold.refused(notes, CONDITION_WORDS[said], own, r["raised"], plan, t, prob.seen)  # noted
                t, ds, cond, r = t + 1, None, None, None  # every call there must raise or be right (refused: retried)
                continue
            if r.get("raised"):
                result["error"] = hold.out_of_memory(r["raised"], ds, len(kept), judge.device) + (
                    f" (in the call where {CONDITION_WORDS[said]})" if said != "plain" else "")
                return
            rows = r["rows"] or ([bad_row("(call)", next(iter(ds.expected.values())), r["failure"])]
                                 if r["failure"] else [])
            passed = r["failure"] is None and bool(rows)
            trials.append({"seed": seed, "tag": f"{si}:{t}", "condition": said, "outputs": rows, "passed": passed,
                           **({"moved": ds.vary} if ds.vary else {}), **hold.memory(ds, r)})
            held.append(hold.kept_fingerprints(sess.shared, ds, (r["reply"] or {}).get("returned") or {},  # a .cu's
                                               cond.strided == "moved" and kind != "cu") if passed else {})  # has no views
            kept |= {len(held) - 1} if cond.keep else set()
            hold.after_a_call(sess, first, trials, held, kept, checks, watched)
            # a reference constant on moved inputs (a ReLU of inputs shifted far below zero) says nothing of the problem's
            result["warnings"] += [w for w in r["warnings"] if w not in result["warnings"]
                                   and not (said.startswith("range:") and w.endswith(CONSTANT_REFERENCE))]
            notes += [n for n in r.get("notes") or [] if n not in notes]
            earlier = hold.between_calls(first, ds, judge.device, notes)
            after = ds.rng_after if passed and not cond.train and cond.expected is None else None
            t, ds, cond, r = t + 1, None, None, None  # freed before the next draw (H100 80GB: l1norm's 8 GiB sets)
        hold.after_the_calls(sess, prob, first, trials, held, notes, watched, kept)
        result["build"] = result["build"] or (sess.builds.get("k") if sess else None)


def profile(judge: Judge) -> dict[str, Any]:
    """The timing loop (every call poisoned, several verified), a check on inputs never seen, then the runs
    under ncu (the measured call inside the NVTX range; every call verified).  A call that launches more
    kernels than the run's budget gets two: ncu's census of every launch, then ncu's full sections for the
    kernels the census says matter (profiling/inventory.py); any other call one, with full sections for
    every launch."""
    from .. import gpustate

    spec, cfg = judge.spec, judge.cfg
    kernel = Path(spec["kernel"])
    path, kind = _kernel_entry(judge, kernel)
    ncu_worker = judge.start_worker("ncu", prefix=spec["ncu_prefix"])  # its start overlaps the timing run
    timer = judge.start_worker("kernel")
    timer.hello(cfg.impl)
    import_kernel(timer, "k", path, kind, cfg)
    prob = judge.problem(dict(cfg.dims), kernel)
    first = prob.draw(judge.rng.randrange(1 << 30))  # a secret seed, as every timed call's
    sess = Session(judge, timer, prob, {"k": (path, kind)}, first, "t")
    sess.prepare_sets(cfg.warmup + cfg.trials)
    judge.mark("timer_ready")
    gpu_check = judge.check_gpu_is_ours("the timing")
    index = judge.torch.device(judge.device).index or 0
    before = gpustate.snapshot(index, judge._uuid())
    loop = timed_loop(sess, "k", cfg.warmup, cfg.trials, label="the timing run")
    after = gpustate.snapshot(index, judge._uuid())
    if loop["failure"]:
        raise MeasuredFailure(harness_hint(sess, loop))
    sess.timed()
    fresh = prob.draw(judge.rng.randrange(1 << 30))  # a secret seed: inputs no kernel could prepare
    r = sess.call("k", fresh, checked=True)
    if r["failure"]:
        raise MeasuredFailure(harness_hint(sess, {"failure": "the timing run: the call on inputs never seen "
                                                         f"before, after the timed calls, is wrong: {r['failure']}",
                                                         "rows": r["rows"]}))
    hint = None
    if spec.get("census_prefix"):  # one more call, under torch's profiler: however it ends, only a hint
        try:
            hint = (sess.call("k", fresh, checked=False, inventory=True)["reply"] or {}).get("inventory")
        except Exception:  # noqa: BLE001 - a worker that cannot profile itself: the census decides
            hint = None
    judge.end_worker(timer)
    judge.mark("timed")
    timing, sets = timing_block(loop, cfg.warmup, cfg.trials, judge.device), sess.sets
    del sess, fresh  # the timing's shared buffers and its last draw, before the runs under ncu
    free_cached()
    census, ncu_worker = census_first(judge, hint, ncu_worker, path, kind, prob, first, sets)
    ncu = ncu_run(judge, ncu_worker, path, kind, prob, first, sets, "the run under ncu")
    judge.mark("ncu")
    return {"timing": timing, "phases_s": judge.phases, "gpu_state": {"before": before, "after": after},
            "gpu": judge.gpu_info(), "gpu_check": gpu_check, "ncu": ncu, "census": census,
            **judge.isolation(),
            "output_bytes": first.nbytes()["outputs_bytes"], "inputs_bytes": first.nbytes()["inputs_bytes"]}


def benchmark(judge: Judge) -> dict[str, Any]:
    """Every version (one worker: checked, timed in rounds with the others, checked on fresh inputs; the A/B of
    each transition read from the same rounds), then the baselines in a worker that imports no kernel.  The
    solution is timed as a row of its own only where no version has its bytes."""
    spec, cfg = judge.spec, judge.cfg
    warmup, trials, drop = int(spec["warmup"]), int(spec["trials"]), int(spec["discard_first"])
    kernels = [{"name": v["version"], "kernel": v["kernel"]} for v in spec["versions"]]
    sol = Path(spec["solution"]["kernel"]).read_bytes()
    same = next((k["name"] for k in kernels if Path(k["kernel"]).read_bytes() == sol), None)
    if same is None:
        kernels.insert(0, {"name": "solution", "kernel": spec["solution"]["kernel"]})
    entries = {k["name"]: _kernel_entry(judge, Path(k["kernel"])) for k in kernels}

    def meanwhile() -> tuple[WorkerProc, Problem, DataSet]:  # while the libraries build: the timing worker's start,
        (w := judge.start_worker("kernel")).hello(cfg.impl)  # the problem and its first data set
        prob = judge.problem(dict(cfg.dims), Path(spec["solution"]["kernel"]))
        return w, prob, prob.draw(judge.rng.randrange(1 << 30))  # a secret seed, as every timed call's

    w, prob, first = prebuild(judge, entries, meanwhile)
    items = {n: _item(n) for n in entries}
    res: dict[str, Any] = {"device": {"name": judge.device}, "torch": judge.torch.__version__,
                           "items": list(items.values()), "ab": []}
    if judge.device.startswith("cuda"):
        res["device"] = {"name": judge.torch.cuda.get_device_name(),
                         "capability": ".".join(map(str, judge.torch.cuda.get_device_capability()))}
    for name, (path, kind) in entries.items():
        try:
            import_kernel(w, name, path, kind, cfg)
        except (KernelFailed, UsageError) as exc:
            items[name].update(available=False, why=" ".join(str(exc).split())[:300])
    usable = {n: e for n, e in entries.items() if items[n]["available"]}
    sess = Session(judge, w, prob, usable, first, "b")
    sess.prepare_sets(len(usable) * (warmup + trials + 2))
    res["gpu_check"] = judge.check_gpu_is_ours("the benchmark")
    res["input_sets"] = "fresh per call" if sess.fresh else "two, chosen at random per call"
    for name in usable:
        r = sess.call(name, first, checked=True)
        items[name].update(correct=r["failure"] is None, error=r["failure"])
        if r.get("raised"):
            items[name].update(available=False, why=r["failure"])
    timed = [n for n in usable if items[n]["available"]]
    progress(f"timing {', '.join(timed)} in {warmup} warmup + {trials} timed rounds, each calling every one once in "
             f"an order drawn per round (every call poisoned, some verified){_at()}")
    loops, res["rounds"] = budgeted_rounds(sess, timed, warmup, trials, spec.get("budget_s")) if timed else ({}, {})
    ran = res["rounds"]
    sess.timed()
    fresh, ok = prob.draw(judge.rng.randrange(1 << 30)) if loops else None, []  # a secret seed; serves every version
    for name, loop in loops.items():
        item = items[name]
        if loop["failure"]:
            item.update(correct_after=False, error=item["error"] or loop["failure"])
            continue
        rf = sess.call(name, fresh, checked=True)
        item["correct_after"] = rf["failure"] is None
        if rf["failure"]:
            item["error"] = item["error"] or f"with fresh inputs after the timed calls: {rf['failure']}"
        item["timing"] = timing_block(loop, ran["warmup"], ran["trials"], judge.device)
        item["samples_us"] = item["timing"].pop("samples_us")[drop:]
        if item["correct"] and item["correct_after"]:
            ok.append(name)
    res["ab"] = [{"from": a, "to": b, "samples_a": items[a]["samples_us"], "samples_b": items[b]["samples_us"],
                  "host_overhead_us": [loops[a]["host_overhead_us"], loops[b]["host_overhead_us"]]}
                 for a, b in spec["ab"] if a in ok and b in ok]
    if same is not None:  # the solution's row is its version's (the same bytes, timed once)
        res["items"].insert(0, dict(items[same], name="solution", samples_us=list(items[same]["samples_us"])))
    judge.end_worker(w)
    del sess, fresh  # the buffers shared with the worker, the last draw and the cache, before the baselines' worker
    free_cached()
    base = baselines(judge, prob, first)
    res["items"] += base.pop("items")
    return {**res, **base, **judge.isolation()}


def _item(name: str) -> dict[str, Any]:
    return dict(name=name, available=True, why=None, correct=False, correct_after=None, error=None, samples_us=[], timing=None)


def baselines(judge: Judge, prob: Problem, first: DataSet) -> dict[str, Any]:
    """Eager, torch.compile and FlashInfer, timed like the kernels in a worker that imports ref.py and no
    kernel file, with the run's one set of weights."""
    spec, cfg = judge.spec, judge.cfg
    warmup, trials, drop = int(spec["warmup"]), int(spec["trials"]), int(spec["discard_first"])
    first_out = next(iter(first.expected.values()))
    out: dict[str, Any] = {"items": [], "output_dtype": str(first_out.dtype).replace("torch.", ""),
                           "tolerances": applied_tolerances(first.expected, judge.tolerance, judge.ref)}
    kb = prob.model is not None
    wanted = []
    for b in spec["baselines"]:
        if b == "flashinfer":
            why = flashinfer_missing(judge.ref)
            if why:
                out["items"].append(dict(_item(b), available=False, why=why, correct=None))
                progress(f"{b}: not available ({why})")
                continue
        wanted.append(b)
    if wanted:
        # every kernel's worker has ended (and what it started): the baselines get temporary and cache folders made
        # now, which no kernel could write (torch.compile's and Triton's caches among them)
        w = judge.start_worker("baselines", own_caches=True)
        w.hello(cfg.impl)
        kind = "ref-kb" if kb else "ref"
        extra: dict[str, dict] = {}
        for b in wanted:
            import_kernel(w, b, judge.run_root / "ref.py", kind, cfg)
            extra[b] = {"compile": b == "torch-compile", **({"baseline": "flashinfer"} if b == "flashinfer" else {})}
            if kb:
                extra[b].pop("baseline", None)
        sess = Session(judge, w, prob, {b: (judge.run_root / "ref.py", kind) for b in wanted}, first, "base", baseline=extra)
        sess.prepare_sets(len(wanted) * (warmup + trials + 1))
        out["gpu_check"] = judge.check_gpu_is_ours("the baselines' timing")
        for b in wanted:
            item = _item(b)
            out["items"].append(item)
            r = sess.call(b, first, checked=True)
            item["correct"], item["error"] = r["failure"] is None, r["failure"]
            if r.get("raised"):
                item.update(available=False, why=r["failure"])
                continue
            progress(f"timing {b}: {warmup} warmup + {trials} trials{_at()}")
            loops, ran = budgeted_rounds(sess, [b], warmup, trials, spec.get("baseline_budget_s"), label=f"{b}'s timed calls")
            loop, item["rounds"] = loops[b], ran
            item["correct_after"] = loop["failure"] is None
            if loop["failure"]:
                item["error"] = item["error"] or loop["failure"]
                continue
            item["timing"] = timing_block(loop, ran["warmup"], ran["trials"], judge.device)
            item["samples_us"] = item["timing"].pop("samples_us")[drop:]
        judge.end_worker(w)
    flops_fn, bytes_fn = getattr(judge.ref, "flops", None), getattr(judge.ref, "bytes_moved", None)
    from .. import loader

    out["flops"] = float(loader.call_with(flops_fn, cfg.dims)) if callable(flops_fn) else None
    out["bytes_moved"] = float(loader.call_with(bytes_fn, cfg.dims)) if callable(bytes_fn) else None
    mem = first.nbytes()
    state = sum(t.numel() * t.element_size() for t in prob.state().values() if is_tensor(t))
    out["param_bytes"] = float(state)  # a model's weights are read too (KernelBench's nn.Linear, nn.Conv*d)
    out["io_bytes"] = float(mem["inputs_bytes"] + mem["outputs_bytes"] + state)
    out["output_bytes"] = float(mem["outputs_bytes"])
    out["roofline_why"] = None if (out["flops"] or out["bytes_moved"]) else \
        "ref.py declares neither flops(**dims) nor bytes_moved(**dims)"
    return out


MODES = {"correctness": correctness, "profile": profile, "benchmark": benchmark}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m kernel_loop.measure.judge SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    Path(argv[0]).unlink(missing_ok=True)  # read once, before any worker starts: no kernel reads the step's settings
    seal = spec.pop("seal", None)  # written into the result alone (session.read_result): no worker is told it
    proctree.become_subreaper()
    judge = started = None
    try:
        started = Started(spec)
        try:
            import torch  # noqa: F401
        except ImportError:
            raise UsageError("torch is not installed: pip install torch (a CUDA build)") from None
        judge = Judge(spec, started)
        result: dict[str, Any] = MODES[spec["mode"]](judge)
        result.setdefault("error", None)
    except UsageError as exc:
        result = {"error": str(exc), "usage": True}
    except MeasuredFailure as exc:
        result = {"error": str(exc)}
    except Exception as exc:
        result = {"error": guards.judge_failed(exc)}
    finally:
        if judge is not None:
            judge.close()
        elif started is not None:
            started.close()
        proctree.end_descendants()
    write_json(Path(spec["result_path"]), {**result, "seal": seal}, depth=0)  # read by the step alone
    return 0


if __name__ == "__main__":
    sys.exit(guards.leaving(main()))
