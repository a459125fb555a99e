"""The controlled vocabularies of kernel-loop, in one place.

- implementations (``IMPLS``; the KBS calls them languages) and the kernel file suffixes each takes;
- kernel types, shared by ``init`` (run.json ``kernel_type``) and the KBS pages;
- GPU architectures, KBS page kinds and confidence levels;
- the conditions of a correctness call in words (``CONDITION_WORDS``: what correctness.md lists and a failure names);
- bottleneck classes and symptom tags: the profiler's classifier (``profiling/classify.py``) fires these
  tags from measured ncu metrics, and the knowledge base keys its pages by the same tags.
  Nothing else may invent a tag: ``kbs check`` rejects pages whose ``symptoms`` use a name that
  is not listed here.

Symptom thresholds follow the stock Nsight Compute rules where one exists (marked
"ncu rule"); the others are heuristics, marked as such, that a later profile
must confirm.  Metric keys are the short names of ``profiling/metrics.py``.
"""

from __future__ import annotations

# Implementations (languages) and the kernel file suffixes each accepts; the first is the default.
IMPLS = ("cuda-cpp", "cutlass", "cute-dsl", "triton")
# the languages a KBS page may name: the implementations, plus the tile languages and kernel
# libraries precedents are written in (a PR note on TileLang or ThunderKittens names its own)
LANGUAGES = (*IMPLS, "tilelang", "thunderkittens", "cuda-python")
IMPL_SUFFIX = {"cuda-cpp": ".cu", "cutlass": ".cu", "cute-dsl": ".py", "triton": ".py"}
# Every suffix an implementation's kernel file may have: CUDA C++ and CUTLASS also come as a .py that builds
# its CUDA source with torch.utils.cpp_extension (load_inline / load), as KernelBench solutions do.
IMPL_SUFFIXES = {"cuda-cpp": (".cu", ".py"), "cutlass": (".cu", ".py"), "cute-dsl": (".py",), "triton": (".py",)}
KERNEL_SUFFIXES = (".py", ".cu")

# Kernel families.  ``any`` is what a KBS page lists when its advice holds for every family; a run
# whose kernel fits no family records ``any`` too.
KERNEL_TYPES = ("gemm", "attention", "softmax", "norm", "reduction", "scan", "elementwise",
                "transpose", "conv", "moe", "any")
ARCHITECTURES = ("sm70", "sm75", "sm80", "sm86", "sm89", "sm90", "sm100", "sm120")
KBS_KINDS = ("pattern", "hardware", "language", "kernel-playbook", "pitfall", "tool", "pr-note")
# the benchmark's baselines, timed by a child that imports no kernel file
BASELINES = ("pytorch-eager", "torch-compile", "flashinfer")
CONFIDENCE = ("verified", "source-reported", "inferred", "experimental")

# Bottleneck classes, decided from speed-of-light throughput (see profiling/classify.py).
BOTTLENECK_CLASSES: dict[str, str] = {
    "memory-bound": "Memory throughput is the highest unit and at or above 60% of peak, "
    "clearly ahead of compute.",
    "compute-bound": "SM (compute) throughput is the highest unit and at or above 60% of peak, "
    "clearly ahead of memory.",
    "latency-bound": "Both compute and memory throughput are below 60% of peak: the machine "
    "waits on latency, not on a unit's bandwidth.",
    "balanced": "Compute and memory throughput are within 10 points of each other and at "
    "least one is at or above 60% of peak.",
}

# Symptom tags.  ``rule`` says where the threshold comes from.
SYMPTOMS: dict[str, dict[str, str]] = {
    "uncoalesced-global": {
        "summary": "Global loads or stores touch more 32-byte sectors per request than a "
        "coalesced warp access needs.",
        "fires_when": "global_excess_sectors_pct >= 20 (global L2 sectors beyond the ideal for "
        "the bytes accessed), or sectors_per_request_ld/st > 16.5 (16 is a coalesced warp access "
        "of 16 bytes per lane; 4 sectors of 4 bytes per lane), or ncu's UncoalescedGlobalAccess "
        "rule fires (OPT/WRN)",
        "rule": "heuristic on ncu's ideal of 4 sectors/request; ncu rule UncoalescedGlobalAccess",
    },
    "smem-bank-conflicts": {
        "summary": "Shared-memory accesses serialize on bank conflicts.",
        "fires_when": "smem_bank_conflicts_pct >= 10 (extra shared-memory wavefronts, loads and "
        "stores, as % of all), or ncu's SharedMemoryConflicts or UncoalescedSharedAccess rule "
        "fires (OPT/WRN)",
        "rule": "ncu rule SharedMemoryConflicts",
    },
    "register-spills": {
        "summary": "The compiler spilled registers to local memory.",
        "fires_when": "local_spill_requests > 0",
        "rule": "ncu rule (RegisterSpilling); any spill is reported",
    },
    "occupancy-limited-registers": {
        "summary": "Registers per thread cap the warps an SM can hold.",
        "fires_when": "theoretical_occupancy_pct < 80 and the register limit is the smallest "
        "block limit",
        "rule": "ncu rule TheoreticalOccupancy",
    },
    "occupancy-limited-smem": {
        "summary": "Shared memory per block caps the blocks an SM can hold.",
        "fires_when": "theoretical_occupancy_pct < 80 and the shared-memory limit is the "
        "smallest block limit",
        "rule": "ncu rule TheoreticalOccupancy",
    },
    "occupancy-limited-blocksize": {
        "summary": "Block size or the blocks-per-SM limit caps occupancy.",
        "fires_when": "theoretical_occupancy_pct < 80 and the warps or blocks limit is the "
        "smallest block limit",
        "rule": "ncu rule TheoreticalOccupancy",
    },
    "achieved-occupancy-gap": {
        "summary": "Achieved occupancy is well below theoretical: imbalance or tail.",
        "fires_when": "theoretical_occupancy_pct - achieved_occupancy_pct > 10",
        "rule": "ncu rule AchievedOccupancy",
    },
    "long-scoreboard-stalls": {
        "summary": "Warps wait on global/local memory results (L1TEX long scoreboard).",
        "fires_when": "stall_long_scoreboard is the top stall and > 30% of cycles between "
        "issues, with issue_active < 0.8",
        "rule": "ncu rule CPIStall",
    },
    "short-scoreboard-stalls": {
        "summary": "Warps wait on shared memory or special-function results.",
        "fires_when": "stall_short_scoreboard > 30% of cycles between issues, issue_active < 0.8",
        "rule": "ncu rule CPIStall",
    },
    "barrier-stalls": {
        "summary": "Warps wait at __syncthreads / block barriers.",
        "fires_when": "stall_barrier > 30% of cycles between issues, issue_active < 0.8",
        "rule": "ncu rule CPIStall",
    },
    "mio-throttle-stalls": {
        "summary": "The memory-input/output queue (shared memory, special math) is full.",
        "fires_when": "stall_mio_throttle > 30% of cycles between issues, issue_active < 0.8",
        "rule": "ncu rule CPIStall",
    },
    "lg-throttle-stalls": {
        "summary": "The local/global memory queue is full: too many narrow memory instructions.",
        "fires_when": "stall_lg_throttle > 30% of cycles between issues, issue_active < 0.8",
        "rule": "ncu rule CPIStall",
    },
    "math-pipe-throttle": {
        "summary": "Warps wait for a busy math pipe.",
        "fires_when": "stall_math_pipe_throttle > 30% of cycles between issues",
        "rule": "ncu rule CPIStall",
    },
    "low-issue-efficiency": {
        "summary": "Schedulers issue an instruction on few cycles: too few eligible warps.",
        "fires_when": "issue_active < 0.6 per cycle",
        "rule": "ncu rule IssueSlotUtilization",
    },
    "tail-effect": {
        "summary": "A partial last wave of blocks leaves SMs idle at the end.",
        "fires_when": "waves_per_sm >= 1 with a fractional part, and the partial wave costs "
        ">= 20% (1 / (1 + full waves) >= 0.2)",
        "rule": "ncu rule LaunchStats (tail effect)",
    },
    "small-grid": {
        "summary": "The grid has fewer blocks than SMs, or less than one full wave of resident blocks.",
        "fires_when": "waves_per_sm < 1 or grid_size < sm_count",
        "rule": "ncu rule LaunchStats (small grid)",
    },
    "block-size-not-multiple-32": {
        "summary": "Block size is not a multiple of the warp size, wasting lanes.",
        "fires_when": "block_size % 32 != 0",
        "rule": "ncu rule LaunchStats",
    },
    "tensor-cores-unused": {
        "summary": "A matrix-shaped kernel runs its math on CUDA cores, not tensor cores.",
        "fires_when": "tensor_pipe_pct < 5 while fma_pipe_pct > 30, in a kernel whose own source (or, for a "
        "library kernel, name) does matrix products (heuristic)",
        "rule": "heuristic",
    },
    "wgmma-unused": {
        "summary": "On sm90 the tensor pipe is busy but no wgmma (GMMA) instructions run.",
        "fires_when": "architecture sm90, tensor_pipe_pct >= 5 and gmma_pct == 0 (heuristic)",
        "rule": "heuristic",
    },
    "low-l2-hit-rate": {
        "summary": "Most L2 accesses miss, so data is fetched from DRAM repeatedly.",
        "fires_when": "l2_hit_rate_pct < 50 and dram_throughput_pct >= 40 (heuristic)",
        "rule": "heuristic",
    },
    "warp-divergence": {
        "summary": "Threads of a warp take different branches.",
        "fires_when": "thread_inst_per_inst < 28 (32 = no divergence) (heuristic)",
        "rule": "heuristic",
    },
    "dram-near-peak": {
        "summary": "DRAM bandwidth is close to its peak: only fewer bytes can make it faster.",
        "fires_when": "dram_throughput_pct >= 80",
        "rule": "ncu rule SOLBottleneck (High Throughput)",
    },
    "compute-near-peak": {
        "summary": "An SM unit is close to its peak: only less or cheaper work helps.",
        "fires_when": "sm_throughput_pct >= 80",
        "rule": "ncu rule SOLBottleneck (High Throughput)",
    },
    "launch-overhead": {
        "summary": "Kernels are so short that launch cost and gaps matter.",
        "fires_when": "duration_us < 10 per kernel (heuristic)",
        "rule": "heuristic",
    },
    "multi-kernel": {
        "summary": "The solution launches several kernels: fusion may remove round trips.",
        "fires_when": "more than one kernel profiled for one solution call",
        "rule": "heuristic",
    },
}


def all_tags() -> set[str]:
    """Every name a KBS page may list under ``symptoms``."""
    return set(SYMPTOMS) | set(BOTTLENECK_CLASSES)


def is_known(tag: str) -> bool:
    return tag in SYMPTOMS or tag in BOTTLENECK_CLASSES


# Diagnostic value, most specific first: a tag that names a cause (uncoalesced access, spills)
# says more about the next change than a generic one (low issue efficiency).  The KBS evidence
# step orders its bottleneck query by this list, and query ranking weighs earlier tags more.
PRIORITY: tuple[str, ...] = (
    "uncoalesced-global", "register-spills", "smem-bank-conflicts", "tensor-cores-unused",
    "wgmma-unused", "dram-near-peak", "compute-near-peak", "small-grid", "multi-kernel",
    "occupancy-limited-registers", "occupancy-limited-smem", "occupancy-limited-blocksize",
    "low-l2-hit-rate", "warp-divergence", "barrier-stalls", "mio-throttle-stalls",
    "lg-throttle-stalls", "math-pipe-throttle", "short-scoreboard-stalls", "long-scoreboard-stalls",
    "tail-effect", "launch-overhead", "block-size-not-multiple-32", "achieved-occupancy-gap",
    "low-issue-efficiency",
)


def by_priority(tags: list[str]) -> list[str]:
    """Tags in diagnostic order: bottleneck classes first, then PRIORITY, unknown names last."""
    rank = {t: i for i, t in enumerate(list(BOTTLENECK_CLASSES) + list(PRIORITY))}
    return sorted(dict.fromkeys(tags), key=lambda t: rank.get(t, len(rank)))

# correctness's note where ModelNew's output carries no gradient and Model's does: a limit of the solution, which
# benchmark.json's flags (and so benchmark.md and the report) repeat for the chosen version
NO_GRADIENT_NOTE = ("gradients: not compared: ModelNew's output carries no gradient (a custom kernel without backward), "
                    "where Model's does: a user cannot train through it")
# a correctness failure: with parameters frozen, a gradient ModelNew gave while every parameter trained is gone
FROZEN_LOST = ("with parameters frozen, ModelNew's output carries no gradient to it, where it did while every parameter "
               "trained: a user training the layers before it (adapters) gets none")
DATA_LOST = ("with inputs that ask no gradient (data), ModelNew gives this parameter none, where it did while the inputs "
             "asked one: a user's first layer, fed a batch, never trains (torch.utils.checkpoint(use_reentrant=True) "
             "does this: use use_reentrant=False)")

# a correctness failure: with everything training, a gradient ModelNew's output reached in other calls in this mode
GRAD_GONE = ("ModelNew's output carries a gradient to it in some calls in this mode and none in others (another "
             "layout of the upstream gradient, another batch size): a user's training leaves it as it is in some steps")

# every condition of a correctness call, in words (measure/conditions.py draws them; correctness.md lists them)
CONDITION_WORDS = {
    "plain": "the problem's inputs, every output poisoned, eval() without autograd",
    "pre:zeros": "the outputs handed to the kernel held zeros before the call",
    "pre:random": "the outputs handed to the kernel held random values before the call",
    "pre:stale": "the outputs handed to the kernel held the right answer of other inputs before the call",
    "mode:train+grad": "the model in training mode with autograd on, as a freshly built module is called",
    "mode:train": "the model in training mode, autograd off",
    "mode:grad": "the model in eval() with autograd on",
    "mode:inference": "the model in eval() under torch.inference_mode()",
    "call:nograd": "the call under torch.no_grad(), as a user's inference runs",
    "call:inference": "the call under torch.inference_mode()",
    "range:up": "inputs scaled up (x20 to x500)",
    "range:up:lo": "inputs scaled up by x20, the near end of that range",
    "range:up:hi": "inputs scaled up by x500, the far end of that range",
    "range:down": "inputs scaled down (x0.002 to x0.05)",
    "range:down:lo": "inputs scaled down by x0.002, the far end of that range",
    "range:down:hi": "inputs scaled down by x0.05, the near end of that range",
    "range:shift": "inputs shifted by 2 to 8 RMS (zeros kept)",
    "range:shift:lo": "inputs shifted by 2 RMS, the near end of that range (zeros kept)",
    "range:shift:hi": "inputs shifted by 8 RMS, the far end of that range (zeros kept)",
    "range:flip": "inputs scaled by x-0.5 to x-2 (their signs flipped: inputs drawn never negative go negative)",
    "range:sink": "inputs shifted down by 2 to 500 RMS (zeros kept)",
    "range:sink:lo": "inputs shifted down by 500 RMS, the far end of that range (zeros kept)",
    "range:sink:hi": "inputs shifted down by 2 RMS, the near end of that range (zeros kept)",
    "range:rows": "inputs shifted row by row: each row (a slice along the first dim) on its own, up or down by 2 to "
                  "500 RMS (zeros kept), so rows lie at levels far apart",
    "range:masked": "inputs masked as a left-padded batch's logits: every other row (along the last dim) leads with -inf "
                     "over a quarter to three quarters of its length",
    "layout:strided": "every input handed as a strided view (every other element of a wider tensor), as a user's slice is",
    "layout:padded": "every input handed as rows of a wider tensor (a column slice, big[:, :n]: unit stride along "
                     "the last dim, rows further apart)",
    "layout:permuted": "every input handed dense but in another memory order (channels_last, a transpose's), as a "
                       "user's permuted tensor is; a model's 4-d and 5-d weights channels_last too, as a user's "
                       "model.to(memory_format=torch.channels_last) holds them",
    "layout:permuted:input": "every input handed dense but in another memory order (channels_last, a transpose's), "
                             "the model's weights as it holds them: a user's permuted tensor into a model left as built",
    "layout:weights": "the model's 4-d and 5-d weights channels_last, as a user's model.to(memory_format="
                      "torch.channels_last) holds them, every input as drawn: a user's contiguous tensor into that model",
    "layout:offset": "every input handed dense but as a batch less its first row (big[1:]: at a storage offset, "
                     "16-byte aligned only where a row is)",
    "layout:lead": "every input of three dims or more handed dense with its first two dims swapped in memory (a "
                   "sequence-first tensor made batch-first: the last dim still unit-stride)",
    "layout:moved": "every input (and every output it is handed) in memory of its own, at another address (a user's next)",
    "mode:grad:frozen": "eval() with autograd on and every parameter frozen (requires_grad off: a user's frozen layers, "
                        "as in adapter training); the inputs' gradients compared",
    "mode:grad:partial": "eval() with autograd on and every parameter but the smallest frozen (a bias or a norm's "
                         "scale fine-tuned alone); the gradients of the inputs and of that one compared",
    "mode:grad:data": "eval() with autograd on, every parameter training and the inputs plain data that ask no gradient "
                      "(a network's first layer, fed a batch); the parameters' gradients compared",
    "mode:train+grad:frozen": "training mode with autograd on and every parameter frozen (a user's frozen layers in "
                              "model.train(), adapters training before them); the inputs' gradients compared",
    "mode:train+grad:partial": "training mode with autograd on and every parameter but the smallest frozen (a bias or "
                               "a norm's scale fine-tuned alone in model.train()); the gradients of the inputs and of "
                               "that one compared",
    "mode:train+grad:data": "training mode with autograd on, every parameter training and the inputs plain data that "
                            "ask no gradient (a user's training step: model.train(), a batch, loss.backward()); the "
                            "parameters' gradients compared",
    "mode:train:frozen": "the model in training mode, autograd off, its norm layers in eval() (a user fine-tuning with "
                         "frozen BatchNorm: model.train(), then model.bn.eval()): each layer's own .training decides",
    "mode:train-step": "the model in training mode, autograd off, from the running statistics it held, left as the call "
                       "updates them (nothing put back: a user's training step)",
    "mode:inference:held": "the model in eval() under torch.inference_mode(), from the running statistics it holds",
    "mode:train-step+grad": "the model in training mode with autograd on, from the running statistics it held, left as "
                            "the call updates them, and backward() (a user's training step)",
    "mode:after-train": "the model in eval() right after that training-mode call and the steps before it, from the "
                        "statistics they left",
    "mode:after-train:inference": "the model in eval() under torch.inference_mode(), after training-mode calls, from "
                                  "the statistics they left",
    "weights:updated": "one of the model's parameters (or a norm's running mean) changed in place before the call, on "
                       "about half its elements, by noise or by a swap of their values that keeps every sum (a training "
                       "step on part of the model, a layer reloaded with its units in another order), and put back",
    "weights:updated:again": "the model's parameters changed in place before the call, on the inputs of the last call, put back",
    "weights:twin": "a second instance of the model, with other weights and its float constructor arguments scaled, where Model takes any (correctness.md's notes), called in place of the first (a network's second "
                    "layer of one shape); the first is called next, its weights as they were",
    "weights:twin:train": "a second instance of the model, with other weights and its float constructor arguments scaled, where Model takes any (correctness.md's notes), called in training mode without autograd "
                          "in place of the first (a network's second layer of one shape); the first is called next",
    "weights:twin:again": "a second instance of the model, with other weights and its float constructor arguments scaled, where Model takes any (correctness.md's notes), called under torch.inference_mode() on the "
                          "inputs of the call before it; the first is called next",
    "input:again": "the inputs of the call before it again (a user's repeated batch)",
    "weights:stepped": "the model's parameters changed in place before the call and left so (an optimizer step), then "
                       "called at the run's batch size again with no other change",
    "batch:other": "a batch size other than the run's, on the instance the run's shapes called, as a user's next "
                   "batch",
    "sizes:other": "input sizes other than the run's (those only get_inputs() reads, each a quarter smaller and odd, "
                   "at half the batch), on the instance the run's shapes called, as a user's input of another width",
    "batch:back": "the run's batch size again, after calls at other sizes and a change of the parameters there",
}
