"""Ranking quality on the bundled corpus: realistic queries, each with the page an engineer would want
among the first three.  Queries are worded as an agent would write them after a profile, not as the
page titles; several are filtered to one repository (``--repo``) or to pages with claimed numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernel_loop.kbs import corpus as kbs_corpus
from kernel_loop.kbs import family as kfamily
from kernel_loop.kbs import index
from kernel_loop.kbs import search as search_mod
from kernel_loop.kbs.search import filters_of, query_command, search, search_filtered

# (terms, filters, expected id in the top 3)
CASES = [
    # pattern pages, from measured symptoms
    ("uncoalesced loads strided warp", {"symptoms": ["uncoalesced-global", "memory-bound"], "exclude_kinds": ["pr-note"]},
     "coalesce-global-access"),
    ("spills local memory", {"symptoms": ["register-spills"], "exclude_kinds": ["pr-note"]}, "register-spills"),
    ("bank conflicts shared memory padding", {"symptoms": ["smem-bank-conflicts"], "exclude_kinds": ["pr-note"]},
     "smem-bank-conflict-padding"),
    ("partial last wave", {"symptoms": ["tail-effect"], "exclude_kinds": ["pr-note"]}, "tail-effect-wave-quantization"),
    ("many small launches", {"symptoms": ["launch-overhead", "multi-kernel"], "exclude_kinds": ["pr-note"]},
     "launch-overhead-cuda-graphs"),
    ("softmax row reduction single pass", {"kernel_type": "softmax", "exclude_kinds": ["pr-note"]}, "online-softmax"),
    ("split k small m large k gemm", {"symptoms": ["small-grid"], "kernel_type": "gemm", "exclude_kinds": ["pr-note"]},
     "split-k-gemm"),
    ("wgmma hopper tensor cores idle", {"symptoms": ["wgmma-unused"], "arch": "sm90", "exclude_kinds": ["pr-note"]},
     "hopper-wgmma"),
    ("transpose shared memory tile", {"kernel_type": "transpose", "exclude_kinds": ["pr-note"]}, "smem-transpose-staging"),
    ("benchmark inputs all zeros", {"kind": "pitfall"}, "pitfall-benchmarking-on-zeros"),
    # PR precedents
    ("rmsnorm cuda kernel", {"kind": "pr-note", "repo": "vllm-project/vllm"}, "pr-vllm-project-vllm-16"),
    ("ada fp8 cutlass gemm sm89", {"kind": "pr-note", "repo": "vllm-project/vllm"}, "pr-vllm-project-vllm-6677"),
    ("paged kv flash attention 3 hopper", {"kind": "pr-note", "repo": "vllm-project/vllm"}, "pr-vllm-project-vllm-12093"),
    ("swap ab fp8 gemm small batch", {"kind": "pr-note", "has_claims": True}, "pr-vllm-project-vllm-20396"),
    ("split kv flash decoding triton decode", {"kind": "pr-note", "repo": "sgl-project/sglang"},
     "pr-sgl-project-sglang-2394"),
    ("awq int4 dequantize", {"kind": "pr-note", "repo": "sgl-project/sglang"}, "pr-sgl-project-sglang-4104"),
    ("all-reduce launch configuration", {"kind": "pr-note", "repo": "flashinfer-ai/flashinfer"},
     "pr-flashinfer-ai-flashinfer-1507"),
    ("fuse rope and kv cache write", {"kind": "pr-note"}, "pr-sgl-project-sglang-9014"),
    ("embedding backward accumulation", {"kind": "pr-note", "repo": "pytorch/pytorch"}, "pr-pytorch-pytorch-22016"),
    ("cumsum without synchronization cub", {"kind": "pr-note", "repo": "pytorch/pytorch"}, "pr-pytorch-pytorch-42036"),
    ("fp8 matmul tutorial pflops", {"kind": "pr-note", "repo": "triton-lang/triton"}, "pr-triton-lang-triton-3546"),
    ("moe routing launches fused", {"kind": "pr-note", "language": "triton", "symptoms": ["launch-overhead"]},
     "pr-triton-lang-triton-7369"),
    ("mbarrier reuse tma pipelining", {"kind": "pr-note", "repo": "triton-lang/triton"}, "pr-triton-lang-triton-3938"),
    ("kv cache split kv gqa packing", {"kind": "pr-note", "repo": "Dao-AILab/flash-attention"},
     "pr-dao-ailab-flash-attention-1236"),
    ("varlen scheduler head swizzle", {"kind": "pr-note"}, "pr-dao-ailab-flash-attention-1823"),
    ("run length encode", {"kind": "pr-note", "repo": "NVIDIA/cccl"}, "pr-nvidia-cccl-9699"),
    ("programmatic dependent launch merge sort", {"kind": "pr-note"}, "pr-nvidia-cccl-3114"),
    ("ffma interleave sass fp8 gemm", {"kind": "pr-note", "repo": "deepseek-ai/DeepGEMM"}, "pr-deepseek-ai-deepgemm-42"),
    ("swiglu backward occupancy blackwell", {"kind": "pr-note", "repo": "linkedin/Liger-Kernel"},
     "pr-linkedin-liger-kernel-1271"),
    ("top-k selector thread coarsening", {"kind": "pr-note", "repo": "tile-ai/tilelang"}, "pr-tile-ai-tilelang-2659"),
    ("bias activation dropout fused triton", {"kind": "pr-note", "repo": "facebookresearch/xformers"},
     "pr-facebookresearch-xformers-58"),
    ("rmsnorm hidden 8192 tuned", {"kind": "pr-note", "repo": "NVIDIA/TransformerEngine"},
     "pr-nvidia-transformerengine-747"),
    ("router top-k many experts radix select", {"kind": "pr-note"}, "pr-nvidia-transformerengine-2821"),
    ("transpose padded shared memory tile", {"kind": "pr-note", "symptoms": ["smem-bank-conflicts"]},
     "pr-deepspeedai-deepspeed-8055"),
]


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.delenv(kbs_corpus.ENV_PATH, raising=False)
    mp.setenv("KERNEL_LOOP_CACHE", str(tmp_path_factory.mktemp("cache")))
    c = index.open_index()
    yield c
    c.close()
    mp.undo()


def test_the_ranking_set_is_large_and_mixed():
    assert len(CASES) >= 30
    assert sum(1 for _, f, _ in CASES if f.get("repo")) >= 10


@pytest.mark.parametrize("terms, filters, expected", CASES, ids=[c[2] for c in CASES])
def test_expected_page_in_the_top_three(conn, terms, filters, expected):
    top = [h["id"] for h in search(conn, terms, limit=3, **filters)]
    assert expected in top, top


# --- the family ranking set --------------------------------------------------------------------
# Queries that name a symptom and a kernel family (tests/fixtures/kbs/family_ranking.json): the family's
# playbook and PR notes must come in the top 5 next to the symptom's pattern pages.  The score is the
# precision at 5 over the expected pages (an expected entry that is a list counts when any one of its
# pages is in the top 5), printed, and the set fails below FAMILY_P_AT_5.
FAMILY_SET = Path(__file__).resolve().parents[1] / "fixtures" / "kbs" / "family_ranking.json"
FAMILY_P_AT_5 = 0.93  # measured (issue 27): 0.699 with the ranking before the family boost, 0.971 after


def family_cases() -> list[dict]:
    return json.loads(FAMILY_SET.read_text(encoding="utf-8"))["cases"]


def precision_at_5(search_fn, conn, cases) -> tuple[float, list[str]]:
    """The mean share of each query's expected entries found in its top 5, and a line per miss."""
    shares, misses = [], []
    for case in cases:
        top = [h["id"] for h in search_fn(conn, case["query"], limit=5, **case["filters"])]
        found = 0
        for want in case["expected"]:
            options = want if isinstance(want, list) else [want]
            if any(o in top for o in options):
                found += 1
            else:
                misses.append(f"{case['query']!r} {case['filters']}: {options} not in {top}")
        shares.append(found / len(case["expected"]))
    return sum(shares) / len(shares), misses


def test_the_family_set_is_large_and_names_real_pages(conn):
    cases = family_cases()
    assert len(cases) >= 40
    known = set(index.page_ids(conn))
    for case in cases:
        for want in case["expected"]:
            for page_id in want if isinstance(want, list) else [want]:
                assert page_id in known, (case["query"], page_id)


def test_family_ranking_precision_at_5(conn, capsys):
    p5, misses = precision_at_5(search, conn, family_cases())
    with capsys.disabled():
        print(f"\nkbs family ranking set: precision@5 {p5:.3f} over {len(family_cases())} queries"
              + "".join(f"\n  miss: {m}" for m in misses))
    assert p5 >= FAMILY_P_AT_5, "\n".join(misses)


@pytest.mark.parametrize("text, families, strong", [
    ("MoE small-batch decode on H100", ["moe"], True),  # 'decode' is weak: the strong 'moe' wins
    ("decode with low DRAM throughput", ["attention"], False),
    ("fp8 gemm small batch", ["gemm"], True),
    ("fp8 per-token quant", ["quant"], True),
    ("rms_norm after the residual add", ["norm"], True),
    ("online softmax inside flash attention", ["softmax", "attention"], True),
    ("spills in the inner loop", [], False),
])
def test_the_words_of_a_query_name_its_family(text, families, strong):
    assert kfamily.from_words(text) == (families, strong)


def test_a_run_family_comes_from_its_kernel_type_else_its_name():
    assert kfamily.of_run("softmax", "fp8 quant") == "softmax"
    assert kfamily.of_run("any", "fp8_per_token_quant") == "quant"
    assert kfamily.of_run(None, "my_kernel") is None
    assert kfamily.families_for("decode step", "moe") == [("moe", 1.0), ("attention", kfamily.WEAK)]


def test_family_slots_sit_in_places_four_and_five_and_say_why(conn):
    terms, filters = "decode attention with low DRAM throughput", {}
    hits = search(conn, terms, limit=8, **filters)
    assert hits == search(conn, terms, limit=8, **filters)  # deterministic
    ids = [h["id"] for h in hits]
    assert "playbook-attention" in ids[:5]
    slotted = [i for i, h in enumerate(hits) if h["family_slot"]]
    assert slotted and all(3 <= i < 5 for i in slotted)
    assert [h["id"] for h in search(conn, terms, limit=3)] == ids[:3]  # the limit only cuts the same order


def test_the_family_filter_is_logged_and_replayed(conn):
    filters = filters_of(["memory-bound"], family="quant")
    assert filters == {"symptoms": ["memory-bound"], "family": "quant"}
    assert "--family quant" in query_command("memory-bound", filters, [])
    hits = search_filtered(conn, "memory-bound", filters, 5)
    assert any(kfamily.fit(h, "quant") for h in hits)


# --- the op-family query set ---------------------------------------------------------------------
# Queries a kernel engineer types for the op families of KernelBench levels 1-3 and of common model blocks, as
# words alone, with the symptoms a profile fired, or with the family 'kbs evidence' reads from ref.py.  Each
# family lists the pages such an engineer would want (its own pattern pages, the playbook of its kernel type,
# the generic patterns its bottleneck calls for, and PR notes that did the same change); a query scores the
# number of those pages in its top 5.  The set passes at a mean of at least OP_MEAN_AT_5 with no family below
# OP_FAMILY_MIN_AT_5.
OP_MEAN_AT_5, OP_FAMILY_MIN_AT_5 = 4.0, 3.0
_CAUSAL_CONV1D = ["pr-vllm-project-vllm-18218", "pr-sgl-project-sglang-10680", "pr-sgl-project-sglang-10595",
                  "pr-sgl-project-sglang-10335", "pr-fla-org-flash-linear-attention-972"]
_CE_NOTES = ["pr-nvidia-apex-295", "pr-nvidia-transformerengine-1456", "pr-linkedin-liger-kernel-237",
             "pr-linkedin-liger-kernel-406", "pr-linkedin-liger-kernel-1268", "pr-linkedin-liger-kernel-1266",
             "pr-linkedin-liger-kernel-1267", "pr-linkedin-liger-kernel-1279", "pr-linkedin-liger-kernel-1290",
             "pr-linkedin-liger-kernel-1339", "pr-linkedin-liger-kernel-1356", "pr-linkedin-liger-kernel-1359",
             "pr-linkedin-liger-kernel-1362", "pr-linkedin-liger-kernel-1370", "pr-linkedin-liger-kernel-672",
             "pr-linkedin-liger-kernel-1127", "pr-nvidia-transformerengine-2758", "pr-nvidia-apex-1888",
             "pr-nvidia-apex-1125", "pr-nvidia-apex-725", "pr-linkedin-liger-kernel-1334"]
_SPATIAL_NORM_NOTES = ["pr-nvidia-apex-1695", "pr-nvidia-apex-1713", "pr-nvidia-apex-1887", "pr-pytorch-pytorch-12844",
                       "pr-pytorch-pytorch-17945", "pr-pytorch-pytorch-22130", "pr-pytorch-pytorch-22288",
                       "pr-linkedin-liger-kernel-1112", "pr-linkedin-liger-kernel-1358"]
_MAMBA_NOTES = ["pr-state-spaces-mamba-905", "pr-state-spaces-mamba-965", "pr-state-spaces-mamba-967",
                "pr-state-spaces-mamba-968", "pr-nvidia-cutlass-3344", "pr-ggml-org-llama-cpp-10558",
                "pr-ggml-org-llama-cpp-18505"]
OP_FAMILY_SET: dict[str, dict] = {
    "conv": {
        "relevant": ["conv-transpose-stride-phase-gather", "conv-epilogue-tail-fusion", "playbook-conv-transpose", "playbook-conv", "tensor-core-math", "cp-async-multistage-pipeline", "gemm-epilogue-fusion",
                     "op-chain-fusion-plan", "smem-swizzle", "l2-tile-rasterization", "split-k-gemm",
                     "cutlass-collectives-schedules", "depthwise-conv-direct-kernel", "tma-bulk-copies",
                     "hopper-tma", "ampere-cp-async", "cute-copy-mma-atoms", "stream-k-scheduling",
                     "conv-transpose-gather-formulation", "low-precision-fp8-bf16", "warp-specialization",
                     "pr-ggml-org-llama-cpp-25310", "pr-ggml-org-llama-cpp-14287",
                     "avg-pool-commutes-with-linear-maps", *_CAUSAL_CONV1D],
        "queries": [("conv2d implicit gemm tensor cores", {}),
                    ("3d convolution asymmetric kernel slow", {}),
                    ("conv1d dilated strided", {}),
                    ("convolution tensor cores idle", {"symptoms": ["tensor-cores-unused"]}),
                    ("conv2d square input square kernel", {"kernel_type": "conv"}),
                    ("winograd convolution 3x3", {})],
    },
    "conv-transpose": {
        "relevant": ["conv-transpose-stride-phase-gather", "conv-epilogue-tail-fusion", "playbook-conv-transpose", "conv-transpose-gather-formulation", "playbook-conv", "op-chain-fusion-plan", "tensor-core-math",
                     "gemm-epilogue-fusion", "coalesce-global-access", "depthwise-conv-direct-kernel",
                     "pr-pytorch-pytorch-48675", "pr-pytorch-pytorch-52351", "pr-ggml-org-llama-cpp-25310",
                     "pr-pytorch-pytorch-84543", "kernel-fusion", "spatial-norm-channel-statistics",
                     "pr-ggml-org-llama-cpp-14287"],
        "queries": [("transposed convolution 3d", {}),
                    ("ConvTranspose2d stride 2 output padding", {}),
                    ("deconvolution upsampling kernel", {}),
                    ("conv transpose 1d dilated", {}),
                    ("transposed conv atomics scatter", {"symptoms": ["uncoalesced-global"]}),
                    ("ConvTranspose3d clamp divide", {"family": "conv-transpose"}),
                    ("ConvTranspose1d kernel loops over every input position", {}),
                    ("ConvTranspose2d batch of small images many col2im launches", {}),
                    ("ConvTranspose2d gelu group norm", {"family": "conv-transpose"}),
                    ("transposed convolution gather instead of scatter", {}),
                    ("ConvTranspose2d one thread per output pixel naive kernel", {}),
                    ("conv transpose bias add clamp scaling fused epilogue", {})],
    },
    "depthwise-conv": {
        "relevant": ["depthwise-conv-direct-kernel", "playbook-conv", "mbconv-block-fusion", "coalesce-global-access",
                     "vectorized-access", "smem-bank-conflict-padding", "op-chain-fusion-plan",
                     "batched-gemm-one-launch", *_CAUSAL_CONV1D],
        "queries": [("depthwise convolution", {}),
                    ("depthwise separable conv 2d", {}),
                    ("depthwise conv asymmetric kernel memory bound", {"symptoms": ["memory-bound"]}),
                    ("grouped convolution groups equal channels", {}),
                    ("pointwise conv after depthwise", {}),
                    ("causal depthwise conv1d short convolution", {})],
    },
    "mbconv": {
        "relevant": ["mbconv-expanded-tensor-traffic", "mbconv-block-fusion", "depthwise-conv-direct-kernel", "op-chain-fusion-plan",
                     "spatial-norm-channel-statistics", "pooling-windowed-reduction", "kernel-fusion",
                     "launch-overhead-cuda-graphs", "playbook-conv"],
        "queries": [("MBConv block efficientnet", {}),
                    ("inverted residual block mobilenet", {}),
                    ("squeeze and excitation global pool", {}),
                    ("shufflenet channel shuffle", {}),
                    ("mobilenet many small kernels", {"symptoms": ["launch-overhead", "multi-kernel"]}),
                    ("squeeze excitation fused into depthwise conv", {}),
                    ("efficientnet depthwise conv batchnorm relu6", {})],
    },
    "pooling": {
        "relevant": ["pooling-tiled-halo-single-pass", "playbook-pooling", "pooling-windowed-reduction", "playbook-reductions", "pr-pytorch-pytorch-44211",
                     "coalesce-global-access", "vectorized-access", "op-chain-fusion-plan", "kernel-fusion",
                     "dram-near-peak-reduce-bytes", "argmax-value-index-reduction", "mbconv-block-fusion",
                     "pr-pytorch-pytorch-24872", "avg-pool-commutes-with-linear-maps"],
        "queries": [("max pooling 3d", {}),
                    ("average pooling 2d", {}),
                    ("max pool 1d", {}),
                    ("global average pooling channels last", {}),
                    ("avg pool 3d memory bound", {"symptoms": ["memory-bound"]}),
                    ("adaptive avg pool after conv", {"family": "pooling"}),
                    ("max pool 2d channels last", {})],
    },
    "rnn": {
        "relevant": ["playbook-rnn", "rnn-cell-fusion", "persistent-rnn-weights-on-chip", "launch-overhead-cuda-graphs",
                     "kernel-fusion", "persistent-kernels", "gemm-epilogue-fusion", "small-grid-more-parallelism",
                     "playbook-gemm", "gemv-skinny-gemm-bandwidth", "cuda-cooperative-groups",
                     "pr-fla-org-flash-linear-attention-848", "pr-flashinfer-ai-flashinfer-4001",
                     "pr-sgl-project-sglang-17094", "pr-pytorch-pytorch-11248"],
        "queries": [("LSTM cell fusion", {}),
                    ("GRU bidirectional", {}),
                    ("vanilla RNN small batch", {}),
                    ("lstm many tiny kernels per time step", {"symptoms": ["launch-overhead"]}),
                    ("recurrent weights persistent kernel", {}),
                    ("nn.LSTM forward hidden state", {"family": "rnn"}),
                    ("GRU many time steps small batch", {})],
    },
    "scan": {
        "relevant": ["playbook-scans", "single-pass-scan-decoupled-lookback", "pr-pytorch-pytorch-42036",
                     "warp-shuffle-reductions", "pr-nvidia-cccl-3545", "pr-nvidia-cccl-3546", "pr-nvidia-cccl-3559",
                     "pr-nvidia-cccl-3560", "pr-nvidia-cccl-2400", "pr-nvidia-cccl-121", "pr-nvidia-cccl-163",
                     "pr-nvidia-cccl-228", "pr-nvidia-cccl-289", "pr-nvidia-cccl-295", "pr-nvidia-cccl-302",
                     "pr-nvidia-cccl-306", "pr-nvidia-cccl-325", "pr-nvidia-cccl-3617", "pr-nvidia-cccl-5283",
                     "pr-nvidia-cccl-6639", "pr-nvidia-cccl-10519", "ssm-selective-scan-kernels", "pr-tile-ai-tilelang-2664",
                     "pr-fla-org-flash-linear-attention-1069", "pr-cupy-cupy-4366", "pr-cupy-cupy-2907"],
        "queries": [("cumulative sum scan", {}),
                    ("cumsum exclusive reverse", {}),
                    ("cumprod along dim", {}),
                    ("masked cumsum", {}),
                    ("prefix sum decoupled look-back", {}),
                    ("cumsum memory bound", {"symptoms": ["memory-bound"], "kernel_type": "scan"}),
                    ("cumsum two pass reduce then scan", {}),
                    ("cumsum along dim 1 of a 2d tensor", {"kernel_type": "scan"}),
                    ("reverse cumsum flip", {}),
                    ("inclusive scan memory bound extra passes", {"symptoms": ["memory-bound"]})],
    },
    "argreduce": {
        "relevant": ["argmax-value-index-reduction", "playbook-reductions", "warp-shuffle-reductions",
                     "coalesce-global-access", "small-grid-more-parallelism", "vectorized-access",
                     "pooling-windowed-reduction", "bytes-in-flight-ilp", "pr-pytorch-pytorch-26181",
                     "pr-pytorch-pytorch-42004", "pr-nvidia-cccl-2647", "pr-nvidia-cccl-10731"],
        "queries": [("argmax over a dimension", {}),
                    ("argmin over dim 1", {}),
                    ("argmax ties first index", {}),
                    ("arg max reduction small grid", {"symptoms": ["small-grid"]}),
                    ("index of the maximum value per row", {"family": "argreduce"}),
                    ("argmax dim=1 of a 3d tensor", {}),
                    ("argmin and argmax of the same tensor", {}),
                    ("argmax int64 index large tensor", {}),
                    ("torch.argmax mismatch on repeated values", {})],
    },
    "gemv": {
        "relevant": ["gemv-skinny-gemm-bandwidth", "pr-flashinfer-ai-flashinfer-4038", "pr-mit-han-lab-llm-awq-85",
                     "pr-mit-han-lab-llm-awq-90", "split-k-gemm", "dram-near-peak-reduce-bytes", "vectorized-access",
                     "playbook-gemm", "small-grid-more-parallelism", "pr-flashinfer-ai-flashinfer-2019",
                     "pr-bitsandbytes-foundation-bitsandbytes-1949", "pr-vllm-project-vllm-34302",
                     "pr-ggml-org-llama-cpp-9816", "pr-ggml-org-llama-cpp-5394", "pr-ggml-org-llama-cpp-16715"],
        "queries": [("gemv", {}),
                    ("matrix vector multiplication memory bound", {}),
                    ("tall skinny matmul", {}),
                    ("gemv low dram throughput", {"symptoms": ["memory-bound"]}),
                    ("gemv fp16 vectorized loads", {}),
                    ("skinny gemm decode batch 1", {}),
                    ("matmul of a matrix by a column vector few rows huge K", {}),
                    ("gemv very long K few rows split-K", {})],
    },
    "batched-gemm": {
        "relevant": ["batched-gemm-small-matrices", "batched-gemm-one-launch", "playbook-gemm", "tail-effect-wave-quantization", "persistent-kernels",
                     "launch-overhead-cuda-graphs", "tensor-core-math", "small-grid-more-parallelism",
                     "split-k-gemm", "stream-k-scheduling", "pr-nvidia-cutlass-760", "playbook-moe",
                     "pr-nvidia-cutlass-3176", "pr-cupy-cupy-930", "pr-ggml-org-llama-cpp-24426"],
        "queries": [("batched matmul", {}),
                    ("3d tensor matrix multiplication", {}),
                    ("bmm many small matrices", {"symptoms": ["launch-overhead"]}),
                    ("4d tensor matrix multiplication einsum", {}),
                    ("strided batched gemm partial wave", {"symptoms": ["tail-effect"]}),
                    ("bmm small matrices low occupancy", {"symptoms": ["small-grid"]}),
                    ("torch.bmm 3d tensors fp16 tensor cores", {}),
                    ("batched gemm varying sizes grouped", {})],
    },
    "loss": {
        "relevant": ["playbook-loss", "loss-kernels-fused-reduction", "online-softmax", "playbook-softmax", "playbook-reductions",
                     "kernel-fusion", *_CE_NOTES],
        "queries": [("cross entropy loss", {}),
                    ("KL divergence loss", {}),
                    ("triplet margin loss", {}),
                    ("hinge loss", {}),
                    ("mse loss huber loss", {}),
                    ("cross entropy large vocabulary memory", {"symptoms": ["memory-bound"]}),
                    ("loss reduction to a scalar", {"family": "loss"})],
    },
    "norm": {
        "relevant": ["conv-epilogue-tail-fusion", "spatial-norm-channel-statistics", "playbook-layernorm-rmsnorm", "playbook-reductions",
                     "op-chain-fusion-plan", *_SPATIAL_NORM_NOTES, "pr-vllm-project-vllm-16",
                     "pr-nvidia-transformerengine-747", "warp-shuffle-reductions", "pr-linkedin-liger-kernel-1350",
                     "pr-dao-ailab-quack-7", "pr-nvidia-transformerengine-2013", "small-grid-more-parallelism"],
        "queries": [("batch norm", {}),
                    ("group norm", {}),
                    ("instance norm", {}),
                    ("groupnorm nhwc small grid", {"symptoms": ["small-grid"]}),
                    ("batchnorm2d training statistics", {"family": "spatial-norm"}),
                    ("layernorm rmsnorm row reduction", {"kernel_type": "norm"})],
    },
    "epilogue-fusion": {
        "relevant": ["conv-epilogue-tail-fusion", "op-chain-fusion-plan", "gemm-epilogue-fusion", "kernel-fusion", "playbook-gemm", "playbook-conv",
                     "pr-nvidia-cutlass-942", "pr-nvidia-cutlass-838", "pr-nvidia-cutlass-892",
                     "pr-facebookresearch-xformers-58", "playbook-elementwise", "online-softmax",
                     "cutlass-collectives-schedules", "pr-pytorch-ao-1671", "pr-facebookresearch-xformers-283",
                     "pr-pytorch-ao-216", "pr-facebookresearch-xformers-42", "pr-nvidia-cutlass-546", "pr-ggml-org-llama-cpp-16715",
                     "playbook-softmax"],
        "queries": [("conv relu bias epilogue", {}),
                    ("gemm sigmoid logsumexp fusion", {}),
                    ("matmul activation fused into epilogue", {}),
                    ("gemm then several elementwise kernels", {"symptoms": ["multi-kernel"]}),
                    ("fuse bias activation dropout", {}),
                    ("conv2d mish mish", {"family": "epilogue-fusion"}),
                    ("matmul bias relu one kernel", {}),
                    ("gemm sigmoid scaling residual add", {})],
    },
    "attention-variants": {
        "relevant": ["masked-attention-block-skipping", "playbook-attention", "online-softmax",
                     "pr-facebookresearch-xformers-389", "pr-flashinfer-ai-flashinfer-1661",
                     "pr-flashinfer-ai-flashinfer-714", "pr-dao-ailab-flash-attention-2313",
                     "tail-effect-wave-quantization", "pr-fla-org-flash-linear-attention-823",
                     "pr-fla-org-flash-linear-attention-867", "pr-fla-org-flash-linear-attention-972",
                     "pr-fla-org-flash-linear-attention-789", "pr-fla-org-flash-linear-attention-289",
                     "pr-fla-org-flash-linear-attention-433", "pr-fla-org-flash-linear-attention-848",
                     "pr-triton-lang-triton-7546", "pr-vllm-project-vllm-20308", "pr-dao-ailab-flash-attention-2026",
                     "pr-dao-ailab-flash-attention-1893", "pr-mlfoundations-open-lm-167", "pr-vllm-project-vllm-50776"],
        "queries": [("causal attention", {}),
                    ("sliding window attention", {}),
                    ("linear attention", {}),
                    ("relu self attention", {}),
                    ("causal mask half the tiles wasted", {"symptoms": ["compute-bound"]}),
                    ("mingpt causal self attention", {"family": "attention"}),
                    ("sliding window attention skip masked tiles", {}),
                    ("causal attention triton block skipping", {}),
                    ("self attention with relu instead of softmax", {}),
                    ("attention scores masked_fill then relu no softmax", {"family": "attention"}),
                    ("causal attention materialized score matrix", {"symptoms": ["memory-bound"]}),
                    ("local attention band mask keys within a window", {})],
    },
    "ssm": {
        "relevant": ["ssm-selective-scan-kernels", "single-pass-scan-decoupled-lookback", "playbook-scans",
                     *_MAMBA_NOTES, *_CAUSAL_CONV1D, "kernel-fusion", "warp-shuffle-reductions",
                     "barrier-stall-reduction"],
        "queries": [("mamba selective scan", {}),
                    ("mamba2 chunked scan state space", {}),
                    ("ssm scan final state", {}),
                    ("selective scan memory bound", {"symptoms": ["memory-bound"]}),
                    ("state space model recurrence", {"family": "ssm"}),
                    ("mamba2 return final state", {"family": "ssm"}),
                    ("selective scan syncthreads every time step", {"symptoms": ["barrier-stalls"]})],
    },
    "netvlad": {
        "relevant": ["netvlad-soft-assignment-fusion", "online-softmax", "playbook-softmax", "batched-gemm-one-launch",
                     "op-chain-fusion-plan", "gemm-epilogue-fusion", "playbook-gemm", "playbook-layernorm-rmsnorm",
                     "kernel-fusion", "pr-nvidia-cutlass-546"],
        "queries": [("netvlad soft assignment", {}),
                    ("netvlad ghost clusters", {}),
                    ("vlad cluster aggregation residuals", {}),
                    ("soft assignment softmax over clusters", {"family": "netvlad"}),
                    ("netvlad many small kernels", {"symptoms": ["multi-kernel"]}),
                    ("netvlad softmax over clusters then matmul", {}),
                    ("vlad residual aggregation batched gemm", {"family": "netvlad"}),
                    ("netvlad no ghost clusters", {})],
    },
}


def op_family_scores(conn) -> tuple[float, dict[str, float], list[str]]:
    """The mean number of relevant pages in the top 5 over the whole set, the mean per family, and a line per
    query that found fewer than 4."""
    all_scores, per_family, lines = [], {}, []
    for fam, spec in OP_FAMILY_SET.items():
        relevant, scores = set(spec["relevant"]), []
        for terms, filters in spec["queries"]:
            top = [h["id"] for h in search(conn, terms, limit=5, **filters)]
            scores.append(sum(t in relevant for t in top))
            if scores[-1] < 4:
                lines.append(f"{fam}: {terms!r} {filters}: {scores[-1]}/5 {top}")
        per_family[fam] = sum(scores) / len(scores)
        all_scores += scores
    return sum(all_scores) / len(all_scores), per_family, lines


def test_the_op_family_set_is_large_and_names_real_pages(conn):
    assert sum(len(spec["queries"]) for spec in OP_FAMILY_SET.values()) >= 80
    assert all(len(spec["queries"]) >= 5 for spec in OP_FAMILY_SET.values())
    known = set(index.page_ids(conn))
    for fam, spec in OP_FAMILY_SET.items():
        assert set(spec["relevant"]) <= known, (fam, set(spec["relevant"]) - known)


def test_op_family_queries_find_their_pages_in_the_top_5(conn, capsys):
    mean, per_family, lines = op_family_scores(conn)
    with capsys.disabled():
        print(f"\nkbs op-family query set: {mean:.2f} relevant of 5 over "
              f"{sum(len(s['queries']) for s in OP_FAMILY_SET.values())} queries; per family "
              + ", ".join(f"{f} {v:.2f}" for f, v in per_family.items()) + "".join(f"\n  low: {x}" for x in lines))
    assert mean >= OP_MEAN_AT_5, "\n".join(lines)
    assert min(per_family.values()) >= OP_FAMILY_MIN_AT_5, per_family


# --- op families: the words of a query, the modules of a ref.py, the missing family -----------------------
@pytest.mark.parametrize("text, first", [
    ("transposed convolution 3d", ["conv-transpose", "conv"]),  # 'transposed' names no transpose kernel here
    ("max pooling 3d", ["pooling", "reduction"]),
    ("LSTM cell fusion", ["rnn", "gemm"]),
    ("cross entropy loss", ["loss", "reduction"]),
    ("mamba selective scan", ["ssm", "scan"]),
    ("decode attention with low DRAM throughput", ["attention"]),  # no op family: as before
])
def test_a_query_names_its_op_family_before_the_kernel_type(text, first):
    assert [f for f, _ in kfamily.families_for(text)] == first


# small hand-written refs in the shape of a KernelBench problem (a Model class, get_inputs)
REF_CONV_T = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.up = nn.ConvTranspose3d(cin, cout, k, stride=2)

    def forward(self, x):
        return torch.clamp(self.up(x), min=0.0) / 2.0
'''
REF_LSTM = '''
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.rnn = nn.LSTM(d, h, num_layers=2, batch_first=True)
        self.head = nn.Linear(h, 10)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])
'''
REF_CUMSUM = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=1)
'''
REF_DEPTHWISE = '''
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x):
        return self.dw(x)
'''
REF_MATVEC = '''
import torch

class Model(torch.nn.Module):
    """Multiplies a matrix by a vector (matrix-vector product)."""
    def forward(self, a, b):
        return torch.matmul(a, b)
'''


@pytest.mark.parametrize("text, main, also", [
    (REF_CONV_T, "conv-transpose", "epilogue-fusion"),
    (REF_LSTM, "rnn", "gemm"),
    (REF_CUMSUM, "scan", None),
    (REF_DEPTHWISE, "depthwise-conv", None),
    (REF_MATVEC, "gemv", "gemm"),
    ("this is not python (", None, None),
])
def test_the_family_of_a_ref_comes_from_its_modules_and_ops(text, main, also):
    fams = kfamily.of_ref_text(text)
    assert (fams[0] if fams else None) == main
    if also:
        assert also in fams


def test_a_family_the_corpus_lacks_is_said_in_one_line_not_filled_with_word_matches(tmp_path, monkeypatch):
    from test_kbs import make_corpus, write_page

    root = make_corpus(tmp_path, monkeypatch)  # five pages, none about pooling, one sharing the word "loads"
    write_page(root, "pool-notes", title="Max pooling with wide loads", kernel_types=("reduction",),
               tags=("pooling",), body="A pooling kernel reads each window once with coalesced loads.")
    conn = index.open_index()
    assert search(conn, "max pooling 3d loads")[0]["id"] == "pool-notes"
    assert search_mod.coverage_gap(conn, "max pooling 3d loads") is None
    (root / "pool-notes.md").unlink()
    conn = index.open_index()
    gap = search_mod.coverage_gap(conn, "max pooling 3d loads")
    assert gap is not None and gap.startswith("no page covers the pooling family") and "\n" not in gap
    # "loads" is in the title of coalesce-loads and vector-loads: with the family missing they are not listed
    assert search(conn, "max pooling 3d loads") == []
    # a filter still lists the pages it matches
    assert [h["id"] for h in search(conn, "max pooling 3d loads", symptoms=["register-spills"])] == ["spill-fix"]
    # a family the corpus has: no line
    assert search_mod.coverage_gap(conn, "register spills") is None
