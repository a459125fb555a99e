"""Child process for ``profile``: ``python -m kernel_loop.ncu_target {ncu,time} <spec.json>``.

Started through ``worker.run_child``.  The spec (written by profile.py) holds run_root,
kernel_path, dims, seed, device, warmup, trials and result_path (the JSON this process writes:
the mode's result, or ``{"error": ...}``).

mode "ncu": runs under ``ncu --nvtx --nvtx-include "kl_measure/"``.  The warmup launches (which
also finish Triton autotuning and JIT compilation) run outside the NVTX range; only one
solution call runs inside ``kl_measure``, so ncu profiles exactly its kernels.
mode "time": no profiler; times the solution with CUDA events (timing.time_callable) and
records the GPU state before and after.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .common import write_json
from .worker import error_text

NVTX_RANGE = "kl_measure"


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from . import gpustate, loader, timing
    from .common import read_json

    run_root = Path(spec["run_root"])
    cfg = read_json(run_root / "run.json")
    device = spec["device"]
    torch.cuda.set_device(torch.device(device))
    case = loader.load_case(cfg, run_root, Path(spec["kernel_path"]), spec["dims"], spec["seed"], device)
    if spec["mode"] == "ncu":
        for _ in range(max(1, spec["warmup"])):
            case.launch()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        case.launch()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        return {"profiled_launches": 1}
    props = torch.cuda.get_device_properties(torch.device(device))
    uuid = str(getattr(props, "uuid", "") or "") or None
    index = torch.device(device).index or 0
    before = gpustate.snapshot(index, uuid)
    result = timing.time_callable(case.launch, warmup=spec["warmup"], trials=spec["trials"],
                                  flush_l2=True, device=device)
    after = gpustate.snapshot(index, uuid)
    return {"timing": result, "gpu_state": {"before": before, "after": after},
            "gpu": {"name": props.name, "cc": f"{props.major}.{props.minor}",
                    "sm_count": props.multi_processor_count}}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("ncu", "time"):
        print("usage: python -m kernel_loop.ncu_target {ncu,time} <spec.json>", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    spec["mode"] = argv[0]
    try:
        out = _run(spec)
    except Exception as exc:  # the kernel's or loader's failure is the result
        out = {"error": error_text(exc)}
    write_json(Path(spec["result_path"]), out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
