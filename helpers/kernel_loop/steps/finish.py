"""``finish <out> --reason TEXT``: end the run at the current version, before the planned final one.

For a run that has reached its goal early (the kernel is at its roofline, or the user wants to stop):
the current version vK must be measured and have its KBS evidence (correctness PASS for the kernel as
it is now, a profile of that kernel, kbs_evidence.md filled in), like a final version.  Writes
``<out>/finish.json`` with the version, the planned final version, the reason and the time; from then
on vK is the final version for the gate's ``--final`` audit, ``benchmark``, ``report`` and ``status``.
It never overwrites an earlier finish.
"""

from __future__ import annotations

import argparse

from .. import plan, records, sidecars
from ..common import UsageError, now_iso, progress, sha256_file, write_json
from ..prose import TODO
from ..rundir import RunDir

MIN_REASON = 10


def register(sub) -> None:
    p = sub.add_parser(
        "finish", help="end the run at the current version, before the planned final one",
        description="Make the current version vK the final version of the run, before the planned vN, with a "
        "recorded reason. vK must be measured like a final version: correctness PASS for the kernel as it is "
        "now, its profile, and a filled kbs_evidence.md. Writes <out>/finish.json; then run the final gate on vK.",
        epilog="Exit codes: 0 recorded, 2 refused (vK not measured or not filled in, already the final version, "
               "or the run already finished).")
    p.add_argument("out", help="run directory")
    p.add_argument("--reason", required=True, help="why the run stops here (the report shows it)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rd = RunDir.open(args.out)
    done = plan.finish_record(rd)
    if done:
        raise UsageError(f"the run already finished at {done['version']} ({done.get('reason')}); "
                         "finish.json is never rewritten")
    if rd.config().device == "cpu":
        raise UsageError("this run uses the cpu test mode (run.json device cpu): finish needs a GPU run's signed "
                         "profile of the version it ends on, which profile makes only on a GPU run (init a new run "
                         "without --device cpu where a CUDA GPU is)")
    k = rd.current_version()
    if k >= plan.planned_final(rd):
        raise UsageError(f"v{k} is already the planned final version: run the final gate on it (--final)")
    reason = " ".join((args.reason or "").split())
    if sum(c.isalpha() for c in reason) < MIN_REASON:
        raise UsageError("--reason needs a real sentence: why the run stops at this version")
    v = rd.v(k)
    kernel = rd.kernel_file(k)
    ksha = sha256_file(kernel)
    cfg = rd.config()
    records.require_correctness(rd.root, f"v{k}", kernel, cfg.device, cfg.gpu)  # signed PASS, this kernel
    records.require_profile(rd.root, f"v{k}", kernel)  # and its signed profile
    if not v.kbs_evidence.is_file() or TODO in v.kbs_evidence.read_text(encoding="utf-8"):
        raise UsageError(f"v{k}/kbs_evidence.md is missing or still has {TODO}: run 'kbs evidence' and fill it in")
    rec = {"schema": 1, "version": f"v{k}", "planned_final": f"v{plan.planned_final(rd)}", "reason": reason,
           "kernel_sha256": ksha, "time": now_iso()}
    records.append(rd.root, "finish", f"v{k}", kernel=ksha, reason=reason)
    write_json(rd.root / sidecars.FINISH_JSON, rec)
    print(rd.root / sidecars.FINISH_JSON)
    progress(f"v{k} is now the final version (planned: v{plan.planned_final(rd)}); next: the final gate on v{k} "
             "(--final), then benchmark and report")
    return 0
