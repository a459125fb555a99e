"""Shared pytest set-up: import the helpers from the source tree; the gpu marker; the test inputs.

The test inputs are committed packed (few files in the skill; see also tests/fixtures/ncu/README.md) and
unpacked once per test session, at import of this module, into a fresh directory under the system temp
area that is removed at exit:

- ``KERNELS``: every member of tests/python/kernels/*.txt as a real file (``KERNELS / "py_vadd.py"``;
  ``klcli.KERNELS`` is the same path); tests never read the packs themselves;
- ``FIXTURES``: a mirror of tests/fixtures in which ``ncu/`` holds the members of
  ``recordings.tar.xz`` next to its notes, and every other entry links to (or is a copy of) the
  committed one.

The kernel packs: ``refs.txt`` (references: ``ref_*.py``, ``kb_ref.py``), ``cpu_kernels.txt`` (torch-only
kernels that also run on the CPU), ``gpu_py_kernels.txt`` (Triton, CuTe DSL and the FlashInfer cases),
``cuda_kernels.txt`` (CUDA C++, CUTLASS) and ``adversarial.txt`` (kernels written to cheat, each with its
docstring naming the attack, the references they need, and the honest kernels beside them).  Names ending
in ``_zeros``, ``_const``, ``_input``, ``_nowrite``, ``_wrong``, ``_bad``, ``_crash``, ``_exit``, ``_raise``,
``_hang``, ``_oob*``, ``_partial``, ``_compile_error`` and names starting ``cheat_`` are broken on purpose.
A pack is its members one after another: each starts with a header line of exactly the form
``==> NAME <==`` (NAME: letters, digits, ``_``, ``.``, ``-``), and its text is every byte after that line up to
the next header line or the end of the pack, exactly as the file was (each member ends with its own final
newline; no separator).  A header line is a syntax error in Python and CUDA C++, so no kernel holds one
outside a string or comment; ``write_pack`` refuses a file that does, or that does not end with a newline.
A name appears once across all packs.  To add a kernel, append a header and its text to a pack.

Run as a script: ``unpack DIR`` writes the kernels to DIR/kernels and the ncu recordings to
DIR/ncu (to read or edit them); ``pack PACK.txt FILE...`` writes a kernel pack from files;
``pack-ncu DIR`` rebuilds tests/fixtures/ncu/recordings.tar.xz from the recordings in DIR.
"""

from __future__ import annotations

import atexit
import io
import lzma
import os
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "helpers"))

# Triton reads TRITON_INTERPRET once, when triton.language is first imported: its own @jit helpers (tl.max) are made
# then.  A test that imported triton before any test set it (torch.profiler's, in a pytest worker's order) left
# every interpreted kernel after it calling a compiled tl.max: "Cannot call @triton.jit'd outside of the scope of a
# kernel".  Where there is no NVIDIA device every Triton kernel of the suite runs interpreted: set for the session.
NO_NVIDIA_DEVICE = not any(Path("/dev").glob("nvidia[0-9]*"))
if "TRITON_INTERPRET" not in os.environ and NO_NVIDIA_DEVICE:
    os.environ["TRITON_INTERPRET"] = "1"
if NO_NVIDIA_DEVICE:
    # One CPU thread for torch's operators (OpenMP's nthreads, read when torch loads it), in this process and every
    # process it starts, where the suite computes on the CPU: the tiny tensors of the tests gain nothing from a thread
    # team, and teams spin while they wait.  Worse, a thread other than the main one (a worker_here worker, the judge's
    # own threads) gets a new team per operator: a BatchNorm1d of 32 x 16 took 0.4 ms there against 0.03 ms in the
    # main thread, and 5 ms while the other xdist worker ran; the CPU suite spent some 45 s of CPU in torch.batch_norm.
    # No test sets or reads the thread count (guards.process_settings compares a call's count with the one before it).
    os.environ.setdefault("OMP_NUM_THREADS", "1")

PACKED_KERNELS = REPO / "tests" / "python" / "kernels"
PACKED_FIXTURES = REPO / "tests" / "fixtures"
NCU_ARCHIVE = "recordings.tar.xz"

# A pack member starts at a line of exactly this shape; its text runs up to the next such line or EOF.
MEMBER_HEADER = re.compile(rb"==> ([A-Za-z0-9_][A-Za-z0-9_.-]*) <==\n")


def read_pack(path: Path) -> dict[str, bytes]:
    """The members of one kernel pack, name -> exact bytes."""
    members: dict[str, bytes] = {}
    name = None
    for line in path.read_bytes().splitlines(keepends=True):
        head = MEMBER_HEADER.fullmatch(line)
        if head:
            name = head.group(1).decode("ascii")
            if name in members:
                raise ValueError(f"{path}: member {name} appears twice")
            members[name] = b""
        elif name is None:
            raise ValueError(f"{path}: the first line must be a '==> NAME <==' header")
        else:
            members[name] += line
    return members


def write_pack(path: Path, files: list[Path]) -> None:
    """Write ``files`` (in the given order) as one pack; refuses text the format cannot hold."""
    out = bytearray()
    for f in files:
        data = f.read_bytes()
        if not MEMBER_HEADER.fullmatch(b"==> " + f.name.encode() + b" <==\n"):
            raise ValueError(f"{f.name}: not a plain file name")
        if data and not data.endswith(b"\n"):
            raise ValueError(f"{f}: does not end with a newline")
        if any(MEMBER_HEADER.fullmatch(line) for line in data.splitlines(keepends=True)):
            raise ValueError(f"{f}: contains a line that reads as a member header")
        out += b"==> " + f.name.encode() + b" <==\n" + data
    path.write_bytes(bytes(out))


def unpack_kernels(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    seen: dict[str, Path] = {}
    for pack in sorted(PACKED_KERNELS.glob("*.txt")):
        for name, data in read_pack(pack).items():
            if name in seen:
                raise ValueError(f"{name} is in both {seen[name].name} and {pack.name}")
            seen[name] = pack
            (dest / name).write_bytes(data)


def pack_ncu(src: Path, archive: Path) -> None:
    """Every plain file of ``src`` but the notes (*.md) into a reproducible tar.xz: sorted names,
    mtime 0, owner 0:0, mode 0644, ustar headers, xz preset 9e."""
    files = sorted(p for p in src.iterdir() if p.is_file() and p.suffix != ".md" and p.name != NCU_ARCHIVE)
    if not files:
        raise ValueError(f"{src}: no recordings to pack (give the folder that `unpack` wrote)")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for f in files:
            data = f.read_bytes()
            info = tarfile.TarInfo(f.name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(lzma.compress(buf.getvalue(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64,
                                      preset=9 | lzma.PRESET_EXTREME))


def _extract_flat(archive: Path, dest: Path) -> None:
    with tarfile.open(archive, mode="r:xz") as tar:
        for m in tar.getmembers():
            if not m.isfile() or "/" in m.name or m.name in ("", ".", ".."):
                raise ValueError(f"{archive}: unexpected member {m.name!r}")
            (dest / m.name).write_bytes(tar.extractfile(m).read())


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        dst.symlink_to(src, target_is_directory=src.is_dir())
    except OSError:
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)


def unpack_fixtures(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(PACKED_FIXTURES.iterdir()):
        if entry.name != "ncu":
            _link_or_copy(entry, dest / entry.name)
            continue
        ncu = dest / "ncu"
        ncu.mkdir()
        for f in sorted(entry.iterdir()):
            if f.name != NCU_ARCHIVE:
                _link_or_copy(f, ncu / f.name)
        _extract_flat(entry / NCU_ARCHIVE, ncu)


def _materialize() -> Path:
    root = Path(tempfile.mkdtemp(prefix="kl-test-inputs-"))
    owner = os.getpid()
    # removed at exit of this process only (not of a forked child that inherits the handler)
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(root, ignore_errors=True))
    unpack_kernels(root / "kernels")
    unpack_fixtures(root / "fixtures")
    return root


if __name__ == "__main__":       # the command line below unpacks on request only
    INPUTS = KERNELS = FIXTURES = None
else:
    INPUTS = _materialize()
    KERNELS = INPUTS / "kernels"
    FIXTURES = INPUTS / "fixtures"
SHARED_NCU = REPO.parent / "shared" / "fixtures" / "ncu-h100"


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# the slowest tests of the CPU suite (seconds of wall time on 2 cores, longest first), each started first by a worker
# of its own: with pytest-xdist the suite ends when its last test does, so a long one drawn late would leave the other
# workers idle
SLOW_FIRST = ("test_hang_is_killed", "test_an_output_written_after_the_call_returned",
              "test_a_benchmark_on_an_empty_build_cache_loads", "test_a_demo_removes_its_temporary_folder", "test_a_process_the_kernel_starts_in_a_new_session",
              "test_a_slow_reference_does_not_make", "test_a_worker_slow_to_exit_is_ended_soon",
              "test_judge_kernel_and_baseline_workers_share",
              "test_child_end_to_end_in_the_cpu", "test_the_baselines_read_no_folder",
              "test_a_kernel_that_patches_the_clock_and_torch", "test_the_worker_sees_no_key",
              "test_a_long_shape_says_where_it_stands", "test_a_more_exact_modelnew_passes_the_gradient",
              "test_a_modelnew_that_replays_its_first_result", "test_demo_replays_an_example",
              "test_a_kernel_cannot_read_the_record_key", "test_repacking_gives_the_same_bytes",
              "test_real_build_is_cached", "test_offline_fetch_install_round_trip", "test_large_data_drawn_fresh",
              "test_triton_vector_add_passes", "test_op_family_queries_find_their",
              "test_a_kernelbench_file_runs_at_its_own_sizes")


def _slow_first(items: list, workers: int) -> list:
    """``items`` with the SLOW_FIRST tests first, in that order; with several pytest-xdist workers, each worker's first
    share of the collection (worksteal hands worker k the k-th contiguous share, split as below, and steals from the
    end of a share) starts with every workers-th of them, so that no one worker runs them all one after another."""
    def rank(item) -> int:
        return next((i for i, name in enumerate(SLOW_FIRST) if item.name.startswith(name)), len(SLOW_FIRST))

    ordered = sorted(items, key=rank)  # stable: the rest keep their order
    slow = [it for it in ordered if rank(it) < len(SLOW_FIRST)]
    rest = ordered[len(slow):]
    if workers < 2:
        return ordered
    shares, left = [], len(items)
    for k in range(workers):  # xdist's split: each idle worker gets len(pending) // (workers left)
        shares.append(left // (workers - k))
        left -= shares[-1]
    out = []
    for k, size in enumerate(shares):
        head = slow[k::workers]
        out += head + rest[:max(0, size - len(head))]
        rest = rest[max(0, size - len(head)):]
    return out + rest


def pytest_collection_modifyitems(config, items):
    items[:] = _slow_first(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """At the very end of a test process (pytest's, or a pytest-xdist worker's): everything alive frozen out of the
    garbage collector, so the interpreter's exit does not trace torch's and the suite's objects again in each of its
    last collections (about a second of CPU a process)."""
    import gc

    gc.freeze()


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch, request):
    """Keep the KBS index and build caches out of the user's home during tests."""
    cache = tmp_path_factory.getbasetemp() / "kl-cache"
    monkeypatch.setenv("KERNEL_LOOP_CACHE", str(cache))
    # a record key of the test session's own, never the user's (created on first use, like the real one)
    monkeypatch.setenv("KERNEL_LOOP_RECORD_KEY", str(tmp_path_factory.getbasetemp() / "kl-key" / "record.key"))
    if request.node.get_closest_marker("gpu"):  # its runs profile without locking the card's clocks (klcli)
        import klcli

        monkeypatch.setattr(klcli, "GPU_TEST", True)
    yield


@pytest.fixture
def judge_here(monkeypatch) -> list[str]:
    """The steps' judge runs in this test's process (klcli.judge_in_this_process); its workers are real
    processes.  For tests of a verdict; tests of the CLI -> judge boundary use the real child judge."""
    import klcli

    return klcli.judge_in_this_process(monkeypatch)


@pytest.fixture
def worker_here(monkeypatch, judge_here) -> list[str]:
    """The judge in this process (judge_here) and its workers too, as threads running the real worker code
    (klcli.workers_in_this_process): for tests of a verdict on a kernel that does not act on its process.
    The worker process itself (its start, sandbox, environment, exit, hang, what it patches) is what the
    tests without this fixture run.  Returns the names of the workers started as threads.  The ring probe's calls freeze
    the process's objects out of garbage collection (guards.before_call): unfrozen after the test."""
    import gc

    import klcli

    yield klcli.workers_in_this_process(monkeypatch)
    gc.unfreeze()
    gc.enable()


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def helpers_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "helpers") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _main(argv: list[str]) -> int:
    cmds = {"unpack": 2, "pack": 3, "pack-ncu": 2}
    if not argv or argv[0] not in cmds or len(argv) < cmds[argv[0]]:
        print("usage: conftest.py unpack DIR | pack PACK.txt FILE... | pack-ncu DIR", file=sys.stderr)
        return 2
    if argv[0] == "unpack":
        target = Path(argv[1])
        unpack_kernels(target / "kernels")
        (target / "ncu").mkdir(parents=True)
        _extract_flat(PACKED_FIXTURES / "ncu" / NCU_ARCHIVE, target / "ncu")
        print(f"wrote {target / 'kernels'} and {target / 'ncu'}")
    elif argv[0] == "pack":
        write_pack(Path(argv[1]), [Path(a) for a in argv[2:]])
        print(f"wrote {argv[1]}")
    else:
        pack_ncu(Path(argv[1]), PACKED_FIXTURES / "ncu" / NCU_ARCHIVE)
        print(f"wrote {PACKED_FIXTURES / 'ncu' / NCU_ARCHIVE}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


@pytest.fixture
def gpu_memory_alone():
    """One test at a time among those that take much of the GPU's memory (a bundled example at KernelBench's size
    needs up to 40 GiB): pytest-xdist's workers take this lock in turn, the small tests go on beside them."""
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / "kernel-loop-tests-gpu-memory.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        _free_this_process_gpu_memory()
        yield
        _free_this_process_gpu_memory()  # before the lock goes to another worker (its own cache it frees itself)


def _free_this_process_gpu_memory() -> None:
    """What the earlier tests of this pytest process left in torch's CUDA cache, handed back before a test that
    needs the device's memory (seen on the H100 80GB: 10.4 GiB held by the pytest process ran the l1norm example's
    judge and worker, 65 GiB together, out of memory)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    import gc

    gc.collect()
    torch.cuda.empty_cache()

