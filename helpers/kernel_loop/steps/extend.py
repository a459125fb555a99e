"""``extend <out> --iterations M``: let a finished run go on past its final version vN, up to vM.

Only when the user asks for more versions.  The run must be at its final version (the state names
vN; every transition gate before it passed).  The extension is a signed ``extend`` record in
records.log (``from`` N, ``iterations`` M), not an edit of run.json: every run.json value stays as
init wrote it, and the gate, the report and ``status`` read the new final version from the record.
The final outputs of the run as it was (benchmark.json/.md, final_report.md/.png, finish.json) move
to ``<out>/before-extend-vN/``, so nothing is lost.  vN's kbs_evidence.md keeps everything but its
``## Decision Link``, which was written for a version with no next change: a copy of the file goes to
``before-extend-vN/`` and the section becomes a TODO asking for v(N+1)'s change (``hypothesis`` would
otherwise quote the final decision as the next change).  vN then needs its hypothesis like any other
version, its transition gate advances the state to v(N+1), and the loop goes on.
"""

from __future__ import annotations

import argparse
import shutil

from .. import plan, records, sidecars
from ..common import UsageError, atomic_write_text, command, progress
from ..kbs.evidence import reopen_decision
from ..prose import TODO
from ..rundir import RunDir

MOVED = (sidecars.BENCHMARK_JSON, sidecars.BENCHMARK_MD, sidecars.FINAL_REPORT_MD, sidecars.FINAL_REPORT_PNG,
         sidecars.FINISH_JSON)


def register(sub) -> None:
    p = sub.add_parser(
        "extend", help="let a finished run go on past its final version (the user asked for more versions)",
        description="Extend a run that reached its final version vN to a new final version vM (M > N). "
        "Records the extension in records.log (run.json stays unchanged), moves the run's final outputs "
        "to <out>/before-extend-vN/, and makes vN an ordinary version: write its hypothesis, gate it, "
        "then continue at v(N+1).",
        epilog="Exit codes: 0 extended, 2 refused (the run is not at its final version, M is not larger than N, "
               "or the records do not verify).")
    p.add_argument("out", help="run directory")
    p.add_argument("--iterations", type=int, required=True, metavar="M",
                   help="the new final version vM (larger than the current final version)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rd = RunDir.open(args.out)
    n = plan.final_version(rd)
    m = args.iterations
    if m <= n:
        raise UsageError(f"--iterations {m} is not past the run's final version v{n}: give a larger M")
    state = rd.recorded_version()
    if state != n:
        raise UsageError(f"the run is not at its final version: current_iteration.txt names "
                         f"{'nothing' if state is None else f'v{state}'}, the final version is v{n}; finish the run "
                         "(every transition gate, then the final gate) before extending it")
    recs = records.read(rd.root)  # verified: an extension is signed onto a chain that holds
    records.check_run_files(rd.root, recs)
    gated = {r.get("version") for r in recs if r.get("step") == "gate"}
    missing = [f"v{j}" for j in range(n) if f"v{j}" not in gated]
    if missing:
        raise UsageError(f"records.log has no gate record for {', '.join(missing)}: the run did not pass every "
                         "transition gate, so it cannot be extended")
    keep = rd.root / f"before-extend-v{n}"
    present = [name for name in MOVED if (rd.root / name).exists()]
    evidence = rd.vdir(n) / sidecars.KBS_EVIDENCE
    reopened, decided = reopen_decision(evidence.read_text(encoding="utf-8"), n) if evidence.is_file() else (None, False)
    if (present or decided) and keep.exists():
        raise UsageError(f"{keep} already exists; refusing to overwrite it")
    if present or decided:
        keep.mkdir()
        for name in present:
            shutil.move(str(rd.root / name), str(keep / name))
    if decided:
        shutil.copyfile(evidence, keep / sidecars.KBS_EVIDENCE)
    if reopened is not None and reopened != evidence.read_text(encoding="utf-8"):
        atomic_write_text(evidence, reopened)
    records.append(rd.root, "extend", f"v{n}", iterations=str(m), **{"from": str(n)},
                   note=f"final version v{n} -> v{m} (asked by the user)")
    print(f"extended {rd.root}: final version v{n} -> v{m}")
    if present:
        progress(f"moved {', '.join(present)} to {keep.name}/ (the run's results as it was at v{n})")
    if decided:
        progress(f"v{n}/{sidecars.KBS_EVIDENCE}'s Decision Link was written for the final version (a copy is in "
                 f"{keep.name}/): it is now a {TODO} asking for v{n + 1}'s change")
    if not (rd.vdir(n).is_dir() and any(rd.vdir(n).iterdir())):
        progress(f"v{n} does not exist yet: next: {command('next', rd.root)} creates it; measure it as any version "
                 f"(correctness, profile, kbs evidence), then its hypothesis and gate; the run now ends at v{m}")
    else:
        fill = f"state v{n + 1}'s change under ## Decision Link in v{n}/{sidecars.KBS_EVIDENCE}, " \
            if reopened is not None else ""
        progress(f"next: {fill}write v{n}/hypothesis.txt ({command('hypothesis', rd.root)} ...), gate v{n}, then "
                 f"{command('next', rd.root)}; the run now ends at v{m}")
    return 0
