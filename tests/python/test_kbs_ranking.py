"""Ranking quality on the bundled corpus: realistic queries, each with the page an engineer would want
among the first three.  Queries are worded as an agent would write them after a profile, not as the
page titles; several are filtered to one repository (``--repo``) or to pages with claimed numbers."""

from __future__ import annotations

import pytest
from kernel_loop.kbs import corpus as kbs_corpus
from kernel_loop.kbs import index
from kernel_loop.kbs.search import search

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
