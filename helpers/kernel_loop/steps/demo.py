"""`kernel-loop demo`: replay a bundled example run in a temporary directory.

Without a GPU: unpack an example run, audit it with the final gate, run `status`, re-render the final
report from its sidecars, and say where everything is.  With a GPU, also re-time every version live
(`benchmark --all-versions`, correctness first) and print the live speedup of the best version over
v0 next to the recorded one.  Nothing is written outside the temporary directory (the KBS index cache
is pointed inside it too), and the temporary directory is removed at the end unless --keep is given;
with --dir the run is unpacked there and kept.

The examples are found in the skill folder or checkout the helpers run from (examples/), else where
``pip install`` put them (<prefix>/share/kernel-loop/examples, shipped as data files by pyproject.toml),
else in a kernel-loop checkout that holds the current directory.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from .. import plan
from ..common import UsageError, invocation, progress, skill_root
from ..rundir import RunDir, gate_script

FILE_GUIDE = [
    ("final_report.md", "the report: versions, predictions scored, A/B verdicts, speedups"),
    ("final_report.png", "chart of time per version, baselines as lines"),
    ("benchmark.md", "best version against PyTorch eager and torch.compile"),
    ("run.json", "the fixed run configuration"),
    ("env_check.md", "GPU, toolchain and measured peaks"),
    ("v0/", "one folder per version: kernel, correctness.md, ncu_summary.md, ncu_details.md,"
            " kbs_evidence.md, hypothesis.txt, JSON sidecars, measured.sha256"),
]


DATA_SUBDIR = Path("share") / "kernel-loop" / "examples"  # where pyproject.toml's data-files install them


def _has_examples(folder: Path) -> bool:
    return folder.is_dir() and any((p / ARCHIVE).is_file() for p in folder.iterdir() if p.is_dir())


def _checkout_around(start: Path) -> Path | None:
    """examples/ of a kernel-loop checkout or skill folder that holds ``start`` (its SKILL.md names the skill)."""
    for folder in (start, *start.parents):
        skill = folder / "SKILL.md"
        try:
            if skill.is_file() and "name: kernel-loop" in skill.read_text(encoding="utf-8", errors="replace")[:400]:
                return folder / "examples"
        except OSError:
            return None
    return None


def example_dirs() -> list[Path]:
    """Where the examples may be, in order: beside the helpers, the installed data files, a checkout around
    the current directory."""
    bases = [Path(sys.prefix), Path(sys.base_prefix), Path(sysconfig.get_path("data"))]
    try:
        bases.append(Path(site.getuserbase()))
    except (AttributeError, OSError):
        pass
    out = [skill_root() / "examples", *(b / DATA_SUBDIR for b in bases)]
    around = _checkout_around(Path.cwd())
    if around is not None:
        out.append(around)
    return list(dict.fromkeys(out))


def examples_dir() -> Path:
    """The first folder of ``example_dirs`` that holds an example archive (the first candidate when none does)."""
    dirs = example_dirs()
    return next((d for d in dirs if _has_examples(d)), dirs[0])


# each example is one archive, examples/<name>/run.tar.gz, holding the run directory as run/
ARCHIVE = "run.tar.gz"
TOP = "run"


def example_key(name: str, where: Path) -> Path:
    """The record key an example was signed with, written to ``where``/<name>.record.key (outside the run
    folder): the ``record_key`` of examples/<name>/loop.json, committed and not secret."""
    plan = examples_dir() / name / "loop.json"
    try:
        hexkey = json.loads(plan.read_text(encoding="utf-8"))["record_key"]
    except (OSError, ValueError, KeyError):
        raise UsageError(f"{plan} holds no record_key: the example's records cannot be verified") from None
    path = Path(where) / f"{name}.record.key"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(hexkey + "\n", encoding="ascii")
    path.chmod(0o600)
    return path


def list_examples() -> list[str]:
    root = examples_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / ARCHIVE).is_file())


def _safe_members(tar: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    """The archive's members below run/, renamed relative to it; refuse anything that could land elsewhere."""
    out = []
    for m in tar.getmembers():
        name = m.name.replace("\\", "/")
        parts = PurePosixPath(name).parts
        if name.startswith("/") or (parts and ":" in parts[0]) or ".." in parts:
            raise UsageError(f"{archive}: refusing member '{m.name}' (absolute path or '..')")
        if not parts or parts[0] != TOP:
            raise UsageError(f"{archive}: refusing member '{m.name}' (outside {TOP}/)")
        if not (m.isfile() or m.isdir()):
            raise UsageError(f"{archive}: refusing member '{m.name}' (not a regular file or folder)")
        if len(parts) == 1:
            continue  # run/ itself becomes the destination folder
        m = copy.copy(m)
        m.name = "/".join(parts[1:])
        out.append(m)
    return out


def unpack_archive(archive: Path, dest: Path) -> Path:
    """Unpack an example archive so that its run/ becomes `dest` (which must not exist yet)."""
    if dest.exists():
        raise UsageError(f"{dest} already exists; choose another --dir")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = _safe_members(tar, archive)
            dest.mkdir(parents=True)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members=members, filter="data")
            else:  # Python without extraction filters: the members were checked above
                tar.extractall(dest, members=members)
    except (tarfile.TarError, EOFError) as exc:
        raise UsageError(f"{archive}: not a readable .tar.gz ({exc})") from exc
    return dest


def unpack_example(name: str, dest: Path) -> Path:
    """Unpack the bundled example `name` into `dest` (the run directory itself)."""
    return unpack_archive(examples_dir() / name / ARCHIVE, dest)


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    """This CLI in a child process: helpers/kloop.py of the skill folder, or the installed package."""
    kloop = skill_root() / "helpers" / "kloop.py"
    cmd = [sys.executable, *([str(kloop)] if kloop.is_file() else ["-m", "kernel_loop.cli"]), *args]
    return subprocess.run(cmd, env=env, text=True, capture_output=True)


def _show(title: str, proc: subprocess.CompletedProcess) -> None:
    print(f"\n== {title} (exit {proc.returncode})")
    out = (proc.stdout + proc.stderr).strip()
    lines = out.splitlines()
    if len(lines) > 25:
        lines = lines[:10] + [f"... ({len(lines) - 20} lines)"] + lines[-10:]
    print("\n".join(lines))


def _recorded_speedup(bench: dict) -> tuple[str | None, float | None]:
    """Best version and its recorded speedup over v0 from benchmark.json's rows."""
    rows = {r.get("name"): r for r in bench.get("rows", [])}
    v0 = rows.get("v0", {}).get("stats_us", {}).get("median")
    best = bench.get("version")
    b = rows.get(best, rows.get("solution", {})).get("stats_us", {}).get("median")
    if v0 and b:
        return best, v0 / b
    return best, None


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# The example `demo` replays when none is named: a fixed one, so adding an example does not change what a new
# user sees first (kernelbench-l1norm-cuda: a KernelBench problem, load_inline CUDA C++, every check passing)
DEFAULT_EXAMPLE = "kernelbench-l1norm-cuda"


def choose(example: str | None, names: list[str]) -> str:
    """The example to replay: the one named, else DEFAULT_EXAMPLE when it is there, else the first."""
    name = example or (DEFAULT_EXAMPLE if DEFAULT_EXAMPLE in names else names[0])
    if name not in names:
        raise UsageError(f"unknown example '{name}'; choose from: {', '.join(names)}")
    return name


def run(example: str | None, keep_dir: str | None, live: bool | None, keep: bool = False) -> int:
    names = list_examples()
    if not names:
        raise UsageError("no example runs found (looked in " + ", ".join(map(str, example_dirs())) + "): the demo "
                         "needs the kernel-loop repository, the installed skill folder, or a pip install of the "
                         "package, which ships them as data files")
    name = choose(example, names)
    if keep_dir and Path(keep_dir).exists() and not Path(keep_dir).is_dir():
        raise UsageError(f"--dir {keep_dir} is a file: give a folder to unpack the example into")
    use_gpu = _gpu_available() if live is None else live
    if live and not _gpu_available():
        raise UsageError("--live needs a CUDA GPU, and torch.cuda.is_available() is False here: run without --live "
                         "to replay the recorded numbers")
    if keep_dir and (Path(keep_dir) / name).exists():
        raise UsageError(f"{Path(keep_dir) / name} already exists; choose another --dir")
    base = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="kernel-loop-demo-"))
    try:
        return _replay(name, names, base, use_gpu, kept=bool(keep_dir or keep))
    finally:
        if not (keep_dir or keep):
            shutil.rmtree(base, ignore_errors=True)


def _replay(name: str, names: list[str], base: Path, use_gpu: bool, *, kept: bool) -> int:
    out = base / name
    unpack_example(name, out)
    # every cache the run may fill (KBS index, nvcc builds, Triton, TorchInductor, matplotlib) stays here
    cache = base / ".cache"
    # the example's records are signed with its own key, shipped beside it and not secret (anyone can forge
    # them: they show the format, not a proof); a run of yours is signed with your own key
    key = example_key(name, base)
    env = dict(os.environ, KERNEL_LOOP_CACHE=str(cache), TRITON_CACHE_DIR=str(cache / "triton"),
               TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), MPLCONFIGDIR=str(cache / "matplotlib"),
               KERNEL_LOOP_RECORD_KEY=str(key))
    last = f"v{plan.final_version(RunDir.open(out))}"
    progress(f"example '{name}' unpacked to {out}; its records are signed with the example's own key (not "
             f"secret, from examples/{name}/loop.json), written to {key}")

    gate = subprocess.run(["bash", str(gate_script()), str(out / last), "--final"],
                          text=True, capture_output=True, env=env)
    _show(f"final gate audit of {last}", gate)
    status = _cli("status", str(out), env=env)
    _show("status", status)
    report = _cli("report", str(out), env=env)
    _show("report re-rendered from the sidecars", report)

    recorded = json.loads((out / "benchmark.json").read_text())
    best, rec_speedup = _recorded_speedup(recorded)
    print(loop_summary(out, recorded, show_chart=kept))
    live_ok = True
    if use_gpu:
        progress("GPU found: re-timing every version live (correctness first)")
        live_dir = base / f"{name}-live"
        shutil.copytree(out, live_dir)
        (live_dir / "benchmark.json").unlink()
        bench = _cli("benchmark", str(live_dir), "--all-versions", "--baselines",
                     "pytorch-eager,torch-compile", env=env)
        _show("live benchmark", bench)
        live_ok = bench.returncode == 0
        if live_ok:
            live_best, live_speedup = _recorded_speedup(json.loads((live_dir / "benchmark.json").read_text()))
            print(f"\nspeedup of {best} over v0: recorded {rec_speedup:.2f}x, live {live_speedup:.2f}x"
                  if rec_speedup and live_speedup else "\nspeedup: not comparable (missing rows)")
    else:
        print("\nno CUDA GPU here: nothing re-measured (recorded numbers only)")
        if rec_speedup:
            print(f"recorded speedup of {best} over v0: {rec_speedup:.2f}x")

    if kept:
        print(f"\nrun directory: {out}")
        for fname, what in FILE_GUIDE:
            if (out / fname.rstrip("/")).exists():
                print(f"  {out / fname}  - {what}")
    else:
        shipped = examples_dir() / name / "final_report.md"
        print(f"\nthe replay ran in {base}, which is removed now (--keep keeps it; --dir DIR unpacks into DIR and "
              "keeps it)" + (f"; the example's report is {shipped}" if shipped.is_file() else ""))
    others = [n for n in names if n != name]
    if others:
        print("\n" + other_examples_hint(others, how=invocation()))
    ok = gate.returncode == 0 and status.returncode == 0 and report.returncode == 0 and live_ok
    return 0 if ok else 1


def other_examples_hint(others: list[str], *, how: str) -> str:
    """The closing line naming the other examples, with a command that runs the way this demo was run (``make
    demo`` runs helpers/kloop.py, and ``kernel-loop`` is on PATH only after pip install)."""
    return f"other examples: {', '.join(others)} ({how} demo --example {others[0]})"


def loop_summary(out: Path, bench: dict, *, show_chart: bool = True) -> str:
    """The loop at a glance: one line per version (benchmark median, speedup over v0, bottleneck), one scored
    transition (the first whose predictions were scored) and the chart's path."""
    from .. import predictions, sidecars
    from ..prose import load_hypothesis
    from ..templating import fmt

    rows = {r.get("name"): r for r in bench.get("rows") or []}
    lines = ["", "== the loop, version by version (medians from benchmark.json)"]
    v0 = (rows.get("v0") or {}).get("stats_us") or {}
    ks = sorted(int(p.name[1:]) for p in out.iterdir() if p.is_dir() and p.name[1:].isdigit() and p.name[0] == "v")
    profiles = {}
    for k in ks:
        ncu = sidecars.load(out / f"v{k}" / sidecars.NCU_JSON) or {}
        profiles[k] = ncu or None
        med = ((rows.get(f"v{k}") or {}).get("stats_us") or {}).get("median")
        speed = f"{v0['median'] / med:.2f}x vs v0" if med and v0.get("median") else "n/a"
        mark = "  <- best" if f"v{k}" == bench.get("version") else ""
        shown = f"{med:9.1f} us" if med else "      n/a"
        lines.append(f"  v{k}: {shown}  {speed:>12}  {ncu.get('bottleneck') or 'n/a'}{mark}")
    for k in ks[:-1]:
        hyp = load_hypothesis(out / f"v{k}") or {}
        preds = hyp.get("predictions") or []
        if not preds:
            continue
        lines.append(f"\n== one transition, v{k} -> v{k + 1}: {hyp.get('single_change') or 'n/a'}")
        for pr in preds:
            s = predictions.score_versions(pr, profiles.get(k), profiles.get(k + 1), (f"v{k}", f"v{k + 1}"))
            change = f", change {fmt(s['change'])}{'%' if s['op'] == 'rel' else ''}" if s["change"] is not None else ""
            lines.append(f"  {s['text']}: {s['status']} (before {fmt(s['before'])}, after {fmt(s['after'])}{change})")
        break
    chart = out / sidecars.FINAL_REPORT_PNG
    if show_chart and chart.exists():
        lines.append(f"\nchart: {chart}")
    return "\n".join(lines)


def register(sub) -> None:
    p = sub.add_parser("demo", help="replay a bundled example run (no GPU needed)",
                       description=__doc__.split("\n\n")[1] if __doc__ else None,
                       epilog="Exit codes: 0 the replay (and, with a GPU, the live benchmark) passed, 1 a step of "
                              "the replay failed, 2 bad usage (unknown example, --dir is a file, --live without "
                              "a GPU, no examples in this installation).")
    p.add_argument("--example", help=f"example name under examples/ (default: {DEFAULT_EXAMPLE})")
    p.add_argument("--dir", dest="keep_dir",
                   help="parent folder for the unpacked run, kept afterwards (default: a new temporary folder, "
                        "removed at the end)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder and say where it is")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--live", dest="live", action="store_true", default=None,
                   help="force live re-measurement (needs a GPU)")
    g.add_argument("--no-live", dest="live", action="store_false", help="never touch the GPU")
    p.add_argument("--list", action="store_true", help="list the bundled examples and exit")
    p.set_defaults(func=_main)


def _main(args) -> int:
    if args.list:
        for n in list_examples():
            print(n)
        return 0
    return run(args.example, args.keep_dir, args.live, keep=args.keep)
