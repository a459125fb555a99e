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
