"""``next <out>``: start v(K+1) from vK's kernel, after the gate has advanced the state.

The gate writes ``v(K+1)`` into current_iteration.txt when vK passes; this step
then creates v(K+1)/ and copies vK's kernel file in under the same name, so the
agent edits a copy and makes exactly one change.  It never overwrites anything.
"""

from __future__ import annotations

from .. import plan
from ..common import UsageError, progress
from ..prose import load_hypothesis
from ..rundir import RunDir, copy_new, kernel_candidates


def register(sub) -> None:
    p = sub.add_parser(
        "next",
        help="create v(K+1) after the gate has advanced the state",
        description="After the gate has passed vK and advanced current_iteration.txt to v(K+1), create "
        "v(K+1)/ with a copy of vK's kernel file as the starting point. Refuses when the state has not "
        "advanced, when v(K+1) already holds files, or past the planned final version.",
        epilog="Exit codes: 0 created, 2 refused (the gate has not advanced the state, the run is complete, or the "
               "folder already holds files).",
    )
    p.add_argument("out", help="run directory")
    p.set_defaults(func=run)


def run(args) -> int:
    rd = RunDir.open(args.out)
    n = plan.final_version(rd)
    if plan.finish_record(rd) and rd.recorded_version() == n:
        raise UsageError(f"the run finished at v{n} (finish.json): there is no next version; run the final gate on "
                         f"v{n} (--final), then benchmark and report")
    new = rd.recorded_version()
    if new is None:
        raise UsageError(f"{rd.state_file} does not exist: run the gate on v0 first "
                         "(it records the state and advances it when v0 passes)")
    if new == 0:
        raise UsageError("the state names v0: the gate has not passed v0 yet, so there is no next version")
    if new > n:
        raise UsageError(f"the state names v{new}, beyond the planned final version v{n} (run.json iterations)")
    prev = new - 1
    try:
        src = rd.kernel_file(prev)
    except UsageError as exc:
        raise UsageError(f"the state names v{new} but v{prev} has no kernel to start from: {exc}") from None
    vdir = rd.vdir(new)
    if new == n and vdir.exists() and any(vdir.iterdir()):
        raise UsageError(f"v{n} is the final version and has started: there is no next version. The run is complete "
                         f"once its final gate passes (check_iteration_gate.sh {vdir} --final), then benchmark and report")
    if vdir.exists() and any(vdir.iterdir()):
        held = ", ".join(sorted(p.name for p in vdir.iterdir()))
        if not kernel_candidates(vdir):
            raise UsageError(f"{vdir} already holds files ({held}) but no kernel: next starts v{new} only in an empty "
                             f"folder, so that nothing of yours is overwritten; move those files out of v{new}, then "
                             "run next again")
        raise UsageError(f"v{new} is the current version (current_iteration.txt names it) and {vdir} already holds "
                         f"files ({held}): the gate has not passed v{new} yet, so there is no v{new + 1} to create. "
                         f"Finish v{new} (correctness, profile, kbs evidence, hypothesis), run the gate on it, then "
                         f"next creates v{new + 1}; nothing was touched")
    dst = vdir / src.name
    copy_new(src, dst)
    print(dst)
    hyp = load_hypothesis(rd.vdir(prev)) or {}
    change = hyp.get("single_change") or f"(v{prev}/hypothesis.txt has no Single change line)"
    progress(f"v{new} starts as a copy of v{prev}/{src.name}. Make exactly one change, the one "
             f"v{prev}/hypothesis.txt names: {change}")
    if new == n:
        progress(f"v{new} is the final version: after correctness and profile, draft and fill its kbs_evidence.md "
                 "(kbs evidence), then run the gate with --final (no hypothesis: vN has no next version)")
    return 0
