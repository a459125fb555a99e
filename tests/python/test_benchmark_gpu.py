"""GPU: a real two-version Triton run driven through the whole loop, then benchmark and report.

init -> correctness -> profile -> kbs evidence (filled here) -> hypothesis -> gate -> next -> the one
change -> correctness -> profile -> kbs evidence -> gate --final -> benchmark (eager + torch.compile,
A/B interval) -> report.  Run on a machine with a CUDA GPU and Nsight Compute:
``pytest -m gpu tests/python/test_benchmark_gpu.py``.  Nothing here asserts a measured number;
the assertions are about structure, correctness and internal consistency.

At its end, the FlashInfer baseline for real, on an RMSNorm and a decode-attention problem.

Each problem is a one-version run (v0 made final with ``finish``) driven through correctness, profile, kbs evidence, the
final gate, ``benchmark --baselines all`` and the report; the FlashInfer row must be available, correct
before and after its timed calls, and counted in the speedups.  Skips cleanly when flashinfer cannot be
imported (bring it to an offline machine with ``scripts/flashinfer_offline.sh``).  Writes what it
measured to ``$KERNEL_LOOP_BENCH_OUT/flashinfer-<problem>.json`` when set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import klcli
import pytest
import runfixture as rf
from kernel_loop import rundir
from kernel_loop.steps import hypothesis

TODO = hypothesis.TODO


def _ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def fill_kbs(vdir: Path, link: str) -> None:
    """Replace the draft's TODO lines the way an agent would, citing a page the queries returned."""
    hits = hypothesis.query_hits(vdir)
    text = (vdir / "kbs_evidence.md").read_text()
    section, out = "", []
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        if TODO in line:
            line = {
                "Selected Evidence": f"- kbs:{hits[0]} explains the measured bottleneck." if hits
                else "- No page matched; the change rests on the measured facts alone.",
                "Rejected / Limits": "- The pages are not specific to this GPU and shape.",
                "Decision Link": link,
            }.get(section, "Filled by the GPU test.")
        out.append(line)
    (vdir / "kbs_evidence.md").write_text("\n".join(out) + "\n")
    assert TODO not in (vdir / "kbs_evidence.md").read_text()


def measure(out: Path, link: str) -> None:
    _ok(klcli.run("correctness", out, timeout=900))
    _ok(klcli.run("profile", out, timeout=900))
    _ok(klcli.run("kbs", "evidence", out, timeout=300))
    vdir = rundir.RunDir.open(out).vdir(rundir.RunDir.open(out).current_version())
    fill_kbs(vdir, link)


@pytest.mark.gpu
def test_two_version_triton_run_benchmark_and_report(tmp_path):
    try:
        gate = rundir.gate_script()
    except Exception:
        pytest.skip("scripts/check_iteration_gate.sh is not there yet")
    src = tmp_path / "src"
    src.mkdir()
    (src / "ref.py").write_text(rf.REF_PY)
    (src / "softmax.py").write_text(rf.KERNEL_TEMPLATE.format(**rf.VERSIONS[0]))
    out = tmp_path / "run dir"  # a space in the path on purpose
    _ok(klcli.run("init", out, "--kernel", "row softmax", "--ref", src / "ref.py", "--impl", "triton",
                  "--baseline", src / "softmax.py", "--dims", "M=4096,N=2048", "--iterations", "1",
                  "--warmup", "5", "--trials", "30", "--kernel-type", "softmax", timeout=900))

    measure(out, "Registers limit occupancy, so the next version launches more warps per row.")
    _ok(klcli.run("hypothesis", out, "--change", "Launch with num_warps=8 instead of 4.",
                  "--rationale", "Occupancy is limited; more warps per row hide memory latency.",
                  "--risk", "Longer reductions per row; may be slower.",
                  "--decision-rule", "Keep if the A/B interval is above 1.0.",
                  "--predict", "duration: -1%", "--predict", "achieved_occupancy_pct: >= 10"))
    _ok(klcli.run("status", out))
    _ok(subprocess.run(["bash", str(gate), str(out / "v0")], capture_output=True, text=True))
    new = _ok(klcli.run("next", out)).stdout.strip()
    assert new == str(out / "v1" / "kernel.py")
    Path(new).write_text(rf.KERNEL_TEMPLATE.format(**rf.VERSIONS[1]))  # the single change
    measure(out, "Final version: the profile shows what remains.")
    assert json.loads(_ok(klcli.run("status", out, "--json")).stdout)["next"]["step"] == "benchmark"
    _ok(subprocess.run(["bash", str(gate), str(out / "v1"), "--final"], capture_output=True, text=True))

    proc = _ok(klcli.run("benchmark", out, "--baselines", "pytorch-eager,torch-compile", "--trials", "40",
                         timeout=900))
    assert "timing torch-compile" in proc.stderr and "timing v0, v1 in" in proc.stderr  # in rounds, the A/B from them
    bench = json.loads((out / "benchmark.json").read_text())
    rows = {r["name"]: r for r in bench["rows"]}
    for name in ("solution", "pytorch-eager", "torch-compile", "v0", "v1"):
        assert rows[name]["available"], (name, rows[name]["why"])
        assert rows[name]["correct"] and rows[name]["correct_after_timing"], (name, rows[name]["error"])
        s = rows[name]["stats_us"]
        assert s["n"] == 40 and 0 < s["min"] <= s["p20"] <= s["median"] <= s["p80"] <= s["max"]
    assert bench["version"] in ("v0", "v1")
    assert set(bench["speedups"]) == {"pytorch-eager", "torch-compile"}
    sol = rows["solution"]["stats_us"]["median"]
    assert bench["speedups"]["pytorch-eager"] == pytest.approx(rows["pytorch-eager"]["stats_us"]["median"] / sol)
    (ab,) = bench["ab"]
    assert (ab["from"], ab["to"]) == ("v0", "v1") and ab["n"] == [40, 40]
    assert (ab["median_a_us"], ab["median_b_us"]) == (rows["v0"]["stats_us"]["median"], rows["v1"]["stats_us"]["median"])
    assert ab["ci95"][0] <= ab["speedup"] <= ab["ci95"][1]
    assert ab["verdict"] in ("faster", "slower", "within noise")
    roof = bench["roofline"]
    assert roof["achieved_gbs"] > 0 and roof["flops"] == 5.0 * 4096 * 2048
    if roof["bandwidth_fraction"] is not None:
        assert 0 < roof["bandwidth_fraction"] < 1.5

    _ok(klcli.run("report", out))
    md = (out / "final_report.md").read_text()
    assert "### v0 -> v1" in md and "Launch with num_warps=8 instead of 4." in md
    row = re.search(r"\| `duration: -1%` \| [^|]+ \| [^|]+ \| [^|]+ \| (held|missed) \|", md)
    assert row, "the duration prediction must be scored against v1's measurement"
    assert "Same-run A/B: speedup" in md
    assert (out / "final_report.png").stat().st_size > 0 or "chart was skipped" in md
    assert json.loads(_ok(klcli.run("status", out, "--json")).stdout)["next"]["step"] == "done"


# --- CUTLASS and CuTe DSL through the whole loop --------------------------------------------------------------
CUTLASS_OK = __import__("os").environ.get("CUTLASS_PATH")
CUTE_DSL_OK = __import__("importlib").util.find_spec("cutlass") is not None


@pytest.mark.gpu
@pytest.mark.parametrize("impl, name, suffix, threads", [
    pytest.param("cutlass", "cutlass_vadd.cu", ".cu", ("(N + 255) / 256, 256", "(N + 127) / 128, 128"),
                 marks=pytest.mark.skipif(not CUTLASS_OK, reason="CUTLASS_PATH is not set")),
    pytest.param("cute-dsl", "cute_dsl_vadd.py", ".py", ("THREADS = 256", "THREADS = 128"),
                 marks=pytest.mark.skipif(not CUTE_DSL_OK, reason="nvidia-cutlass-dsl (import cutlass) is not "
                                          "installed")),
])
def test_cutlass_and_cute_dsl_run_the_whole_loop(tmp_path, impl, name, suffix, threads):
    """v0 -> v1 (one change: the block size) through correctness, profile, the gates, benchmark and report,
    for the two implementations that had only run correctness and profile on a GPU."""
    gate = rundir.gate_script()
    text = (klcli.KERNELS / name).read_text()
    old, new = threads
    assert text.count(old) == 1, (name, old)
    src = tmp_path / "src"
    src.mkdir()
    (src / f"vadd{suffix}").write_text(text)
    out = tmp_path / "run"
    _ok(klcli.run("init", out, "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl", impl,
                  "--baseline", src / f"vadd{suffix}", "--dims", "N=16777216", "--iterations", "1",
                  "--warmup", "5", "--trials", "30", timeout=900))
    measure(out, "The next version launches half as many threads per block.")
    _ok(klcli.run("hypothesis", out, "--change", "Launch 128 threads per block instead of 256.",
                  "--rationale", "A streaming add is DRAM-bound; the block size should not matter.",
                  "--risk", "More blocks to schedule.", "--decision-rule", "Keep if the A/B interval is above 1.0.",
                  "--predict", "duration: -1%"))
    _ok(subprocess.run(["bash", str(gate), str(out / "v0")], capture_output=True, text=True))
    path = Path(_ok(klcli.run("next", out)).stdout.strip())
    assert path.name == f"kernel{suffix}", path
    path.write_text(text.replace(old, new))
    measure(out, "Final version: the profile shows what remains.")
    _ok(subprocess.run(["bash", str(gate), str(out / "v1"), "--final"], capture_output=True, text=True))
    for v in ("v0", "v1"):
        ncu = json.loads((out / v / "ncu.json").read_text())
        assert not ncu["library_fallback"], ncu["library_fallback"]
        assert len(ncu["kernels"]) == 1 and "add_kernel" in ncu["kernels"][0]["name"], ncu["kernels"]
    _ok(klcli.run("benchmark", out, "--baselines", "pytorch-eager,torch-compile", "--trials", "40", timeout=900))
    bench = json.loads((out / "benchmark.json").read_text())
    rows = {r["name"]: r for r in bench["rows"]}
    for row in ("solution", "pytorch-eager", "torch-compile", "v0", "v1"):
        assert rows[row]["available"] and rows[row]["correct"] and rows[row]["correct_after_timing"], \
            (row, rows[row]["why"], rows[row]["error"])
    (ab,) = bench["ab"]
    assert (ab["from"], ab["to"]) == ("v0", "v1")
    _ok(klcli.run("report", out))
    md = (out / "final_report.md").read_text()
    assert "### v0 -> v1" in md and "Launch 128 threads per block instead of 256." in md
    assert json.loads(_ok(klcli.run("status", out, "--json")).stdout)["next"]["step"] == "done"
    print(f"{impl}: solution {rows['solution']['stats_us']['median']:.1f} us, eager "
          f"{rows['pytorch-eager']['stats_us']['median']:.1f} us, compile "
          f"{rows['torch-compile']['stats_us']['median']:.1f} us, A/B v0->v1 {ab['speedup']:.3f} ({ab['verdict']})")


# --- the FlashInfer baseline for real -------------------------------------------------------------------

PROBLEMS = [
    ("rmsnorm", "ref_rmsnorm_fi.py", "triton_rmsnorm.py", "M=8192,N=4096", "norm"),
    ("decode", "ref_decode_fi.py", "torch_decode.py", "H=32,HKV=8,L=8192,D=128", "attention"),
]


@pytest.fixture(scope="module")
def flashinfer_version():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")
    fi = pytest.importorskip("flashinfer", reason="flashinfer is not importable (see scripts/flashinfer_offline.sh)")
    return fi.__version__


@pytest.mark.gpu
@pytest.mark.parametrize("name, ref, kernel, dims, ktype", PROBLEMS, ids=[p[0] for p in PROBLEMS])
def test_flashinfer_baseline_in_the_benchmark(tmp_path, flashinfer_version, name, ref, kernel, dims, ktype):
    out = tmp_path / name
    _ok(klcli.run("init", out, "--kernel", name, "--ref", klcli.KERNELS / ref, "--impl", "triton",
                  "--baseline", klcli.KERNELS / kernel, "--dims", dims, "--iterations", "1", "--warmup", "10",
                  "--trials", "50", "--kernel-type", ktype, timeout=900))
    measure(out, "The final version; nothing follows it.")
    _ok(klcli.run("finish", out, "--reason", "a baseline check: v0 is the final version"))
    _ok(subprocess.run(["bash", str(rundir.gate_script()), str(out / "v0"), "--final"], capture_output=True, text=True))
    proc = _ok(klcli.run("benchmark", out, "--baselines", "all", "--trials", "50", timeout=900))
    bench = json.loads((out / "benchmark.json").read_text())
    rows = {r["name"]: r for r in bench["rows"]}
    fi = rows["flashinfer"]
    assert fi["available"], fi["why"]
    assert fi["correct"] and fi["correct_after_timing"], fi["error"]
    assert "flashinfer" in bench["speedups"] and fi["stats_us"]["median"] > 0
    _ok(klcli.run("report", out))
    assert "flashinfer" in (out / "final_report.md").read_text()
    record = {"problem": name, "dims": dims, "flashinfer": flashinfer_version,
              "medians_us": {n: (r["stats_us"] or {}).get("median") for n, r in rows.items()},
              "host_overhead_us": {n: r.get("host_overhead_us") for n, r in rows.items()},
              "speedups": bench["speedups"], "roofline": bench.get("roofline"), "stderr_tail": proc.stderr[-1500:]}
    print(json.dumps(record, indent=2))
    dest = os.environ.get("KERNEL_LOOP_BENCH_OUT")
    if dest:
        with open(os.path.join(dest, f"flashinfer-{name}.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
