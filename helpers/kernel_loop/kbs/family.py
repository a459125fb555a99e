"""Kernel families for KBS ranking: the words that name each family, and which pages belong to one.

The families are the kernel types of ``vocab.KERNEL_TYPES`` (less ``any``) plus ``quant``, the
quantisation kernels, which have no kernel type of their own (a quant kernel is an elementwise pass or
a row reduction) and are recognised from a page's tags and title instead.  This module is the one
place that maps words to families; ``kbs query`` and the ``kbs evidence`` drafts use it through
``search.search``.

A query names a family with a *strong* word (``softmax``, ``moe``, ``rmsnorm``, ``quant`` ...) or a
*weak* one (``decode`` for attention, ``fp8`` for quantisation, ``linear`` for GEMM ...).  Weak words
count only when no strong word is present: "MoE small-batch decode" is a MoE query, "decode with low
DRAM throughput" an attention one, "fp8 gemm" a GEMM one.
"""

from __future__ import annotations

import re
from typing import Any

from .. import vocab
from .schema import as_list

QUANT = "quant"
FAMILIES: tuple[str, ...] = (*(t for t in vocab.KERNEL_TYPES if t != "any"), QUANT)

# family -> (strong words, weak words); a query is lower-cased and split on anything not a letter or digit
WORDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "attention": (("attention", "attn", "fmha", "mha", "mqa", "gqa", "mla", "flashattention", "flashmla",
                   "flashinfer", "sdpa"),
                  ("decode", "decoding", "prefill", "flash")),
    "softmax": (("softmax", "softmaxes", "logsoftmax", "xentropy"), ("entropy", "logits")),
    "moe": (("moe", "expert", "experts", "mixtral"), ("routing", "router")),
    "gemm": (("gemm", "gemms", "matmul", "matmuls", "gemv", "sgemm", "hgemm"), ("linear", "mm", "bmm", "dense")),
    "norm": (("norm", "norms", "layernorm", "rmsnorm", "l1norm", "l2norm", "groupnorm", "batchnorm",
              "instancenorm", "normalization", "normalisation"), ()),
    "scan": (("scan", "scans", "cumsum", "cumprod", "prefix"), ()),
    "reduction": (("reduction", "reductions", "reduce", "argmax", "argmin"), ("sum", "mean")),
    "transpose": (("transpose", "transposes", "transposed"), ("permute",)),
    "conv": (("conv", "conv1d", "conv2d", "conv3d", "convolution", "convolutions", "im2col", "winograd"), ()),
    "elementwise": (("elementwise", "silu", "gelu", "relu", "swiglu", "geglu"),
                    ("activation", "pointwise", "add", "mul", "axpy", "copy")),
    QUANT: (("quant", "quantize", "quantise", "quantization", "quantisation", "quantizer", "dequant",
             "dequantize", "dequantization"),
            ("fp8", "int8", "int4", "fp4", "nvfp4", "mxfp8", "mxfp4", "w8a8", "w4a16", "w4a8", "awq", "gptq")),
}
# tags and title words that put a page in the quant family
_QUANT_PAGE_RE = re.compile(r"quant")
_SPLIT_RE = re.compile(r"[^a-z0-9]+")


def words_of(text: str) -> list[str]:
    return [w for w in _SPLIT_RE.split(text.lower()) if w]


WEAK = 0.5  # the weight of a family that only weak words name, and of every family after the first


def from_words(text: str) -> tuple[list[str], bool]:
    """The families a text names, in the order their first word appears, and whether strong words named
    them (weak words count only when no strong word is present)."""
    words = words_of(text)
    for strength in (0, 1):
        found: dict[str, int] = {}
        for fam, lists in WORDS.items():
            pos = [i for i, w in enumerate(words) if w in lists[strength]]
            if pos:
                found[fam] = pos[0]
        if found:
            return sorted(found, key=lambda f: (found[f], FAMILIES.index(f))), strength == 0
    return [], False


def families_for(terms: str, kernel_type: str | None = None, family: str | None = None) -> list[tuple[str, float]]:
    """The families a query asks about, each with its weight: ``family`` when given, then ``kernel_type``
    (not ``any``), then those its words name; the first weighs 1 (WEAK when only weak words name it), the
    others WEAK."""
    given = [f for f in (family, kernel_type) if f in FAMILIES]
    named, strong = from_words(terms or "")
    out: dict[str, float] = {}
    for f in given + named:
        if f not in out:
            out[f] = WEAK if out or (f not in given and not strong) else 1.0
    return list(out.items())


def of_run(kernel_type: str | None, kernel_name: str | None) -> str | None:
    """A run's family: its kernel type (run.json, ``init --kernel-type``), else what the kernel's name says."""
    if kernel_type in FAMILIES:
        return kernel_type
    named, _ = from_words(kernel_name or "")
    return named[0] if named else None


def fit(page: dict[str, Any], family: str) -> float:
    """How squarely a page is about one family (0..1): 0 when it is not, 1 for a page of that family
    alone, less for a page listing several kernel types; ``any`` pages are about no family in particular."""
    types = [t for t in as_list(page.get("kernel_types")) if t != "any"]
    if family == QUANT:
        text = " ".join(as_list(page.get("tags")) + [str(page.get("title", ""))]).lower()
        return 1.0 if _QUANT_PAGE_RE.search(text) else 0.0
    if family not in types:
        return 0.0
    return 1.0 / len(types) ** 0.5


def is_playbook_of(page: dict[str, Any], family: str) -> bool:
    """The family's playbook: the kernel-playbook page whose first kernel type is the family."""
    types = as_list(page.get("kernel_types"))
    return page.get("kind") == "kernel-playbook" and bool(types) and types[0] == family
