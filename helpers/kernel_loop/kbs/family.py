"""Kernel families for KBS ranking: the words that name each family, and which pages belong to one.

The families are the kernel types of ``vocab.KERNEL_TYPES`` (less ``any``) plus ``quant``, the
quantisation kernels, which have no kernel type of their own (a quant kernel is an elementwise pass or
a row reduction) and are recognised from a page's tags and title instead.  This module is the one
place that maps words to families; ``kbs query`` and the ``kbs evidence`` drafts use it through
``search.search``.

Op families are finer than kernel types: conv-transpose, depthwise-conv, pooling, rnn, loss ... (``OP_FAMILIES``),
each under a parent kernel type.  A page belongs to one when it lists one of the family's tags, or when its
title names the family; a query names one by a word or a phrase ("transposed convolution", "max pooling 3d",
"LSTM cell"), and the phrase's words then name no other family.  ``of_ref`` reads a ref.py (without importing
it) and lists the families of its modules and torch ops, the main one first (a convolution before the
activations fused after it).  A query whose first family is an op family that no page belongs to gets no
word-only hits: ``search`` says so in one line (``coverage_gap``) instead of filling the first places with
pages that merely share a word.

A query names a family with a *strong* word (``softmax``, ``moe``, ``rmsnorm``, ``quant`` ...) or a
*weak* one (``decode`` for attention, ``fp8`` for quantisation, ``linear`` for GEMM ...).  Weak words
count only when no strong word is present: "MoE small-batch decode" is a MoE query, "decode with low
DRAM throughput" an attention one, "fp8 gemm" a GEMM one.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from .. import vocab
from .schema import as_list

QUANT = "quant"
KERNEL_FAMILIES: tuple[str, ...] = (*(t for t in vocab.KERNEL_TYPES if t != "any"), QUANT)


# op family -> (parent kernel type, words that name it (regexes matched against whole words), phrases
# (regexes over the lower-cased text), page tags that put a page in it)
OP_FAMILIES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "conv-transpose": ("conv", (r"convtranspose[123]?d?", r"deconv\w*", r"conv[123]?d?transpose[123]?d?"),
                       (r"transposed?[\s_-]+conv\w*", r"conv\w*[\s_-]+transposed?\w*", r"fractionally[\s-]+strided"),
                       ("conv-transpose", "transposed-convolution", "deconvolution")),
    "depthwise-conv": ("conv", (r"depthwise", r"dwconv\w*", r"separable"),
                       (r"depth[\s-]+wise", r"group(?:ed)?[\s_-]+conv\w*"),
                       ("depthwise-conv", "depthwise", "grouped-conv", "depthwise-separable")),
    "mbconv": ("conv", (r"mbconv\w*", r"efficientnet\w*", r"mobilenet\w*", r"shufflenet\w*", r"squeezenet\w*"),
               (r"inverted[\s-]+residual\w*", r"squeeze[\s-]+(?:and[\s-]+)?excit\w*", r"channel[\s-]+shuffle",
                r"fire[\s-]+module"),
               ("mbconv", "inverted-residual", "squeeze-excitation", "mobile-block")),
    "pooling": ("reduction", (r"pool(?:s|ing)?", r"(?:max|avg|mean|adaptive\w*|global\w*)pool(?:ing)?[123]?d?",
                              r"pool[123]d"),
                (r"(?:max|average|avg)[\s_-]+pool\w*",),
                ("pooling", "max-pool", "avg-pool", "global-pool")),
    "rnn": ("gemm", (r"rnns?", r"lstms?", r"lstmcell\w*", r"lstmcn", r"grus?", r"grucell\w*", r"recurrent",
                     r"vanillarnn", r"grubidirectional", r"lstms"),
            (r"persistent[\s-]+rnn",),
            ("rnn", "lstm", "gru", "recurrent")),
    "argreduce": ("reduction", (r"argmax", r"argmin", r"arg(?:max|min)s?"),
                  (r"arg[\s_-]+(?:max|min)", r"index[\s-]+of[\s-]+the[\s-]+(?:max|min)\w*"),
                  ("argmax", "argmin", "arg-reduction")),
    "gemv": ("gemm", (r"gemvs?", r"matvec", r"spmv", r"skinny"),
             (r"matrix[\s-]+vector", r"mat[\s-]+vec", r"tall[\s-]+(?:and[\s-]+)?skinny", r"vector[\s-]+matrix"),
             ("gemv", "matrix-vector", "skinny-gemm")),
    "batched-gemm": ("gemm", (r"bmm", r"baddbmm", r"bmms"),
                     (r"batch(?:ed)?[\s_-]+(?:gemm|matmul|matrix[\s-]+multipl\w*|mm)\w*",
                      r"strided[\s-]+batched", r"\d+d[\s_-]+tensor[\s_-]+matrix"),
                     ("batched-gemm", "bmm")),
    "loss": ("reduction", (r"loss(?:es)?", r"\w+loss", r"crossentropy", r"nll", r"kldiv\w*", r"triplet\w*",
                           r"hinge\w*", r"huber\w*", r"mse", r"bce\w*", r"smoothl1\w*"),
             (r"cross[\s_-]*entropy", r"kl[\s_-]+div\w*", r"margin[\s_-]+ranking"),
             ("loss", "cross-entropy", "kl-divergence", "triplet-loss", "hinge-loss")),
    "spatial-norm": ("norm", (r"batchnorm[123]?d?", r"instancenorm[123]?d?", r"groupnorm", r"bn"),
                     (r"batch[\s_-]+norm\w*", r"instance[\s_-]+norm\w*", r"group[\s_-]+norm\w*"),
                     ("batchnorm", "groupnorm", "instancenorm", "spatial-norm")),
    "epilogue-fusion": ("elementwise", (r"epilogues?", r"evt"),
                        (r"(?:bias|activation|relu|gelu)[\s-]+(?:\w+[\s-]+)?(?:epilogue|fusion)",
                         r"fus\w*[\s-]+(?:\w+[\s-]+)?(?:activation|bias|epilogue)\w*",
                         r"(?:conv|gemm|matmul)\w*[\s_+-]+(?:bias|relu|gelu|activation)"),
                        ("epilogue-fusion", "epilogue", "bias-activation")),
    "linear-attention": ("attention", (r"performer", r"deltanet", r"gla", r"retnet", r"gated[\s-]?delta\w*"),
                         (r"linear[\s_-]+attention", r"relu[\s_-]+(?:self[\s_-]+)?attention",
                          r"kernel(?:ized)?[\s-]+attention"),
                         ("linear-attention", "relu-attention")),
    "sliding-window": ("attention", (r"swa", r"swin\w*"),
                       (r"sliding[\s_-]+window", r"local[\s_-]+attention", r"window(?:ed)?[\s_-]+attention"),
                       ("sliding-window", "local-attention", "window-attention")),
    "ssm": ("scan", (r"mamba\w*", r"ssms?", r"ssd", r"s4", r"s6"),
            (r"selective[\s_-]+scan", r"state[\s_-]+space", r"chunked[\s_-]+scan"),
            ("ssm", "mamba", "selective-scan", "state-space")),
    "netvlad": ("gemm", (r"netvlad\w*", r"vlad\w*"),
                (r"soft[\s_-]+assign\w*", r"ghost[\s_-]+clusters?"),
                ("netvlad", "soft-assignment")),
    "triangular-gemm": ("gemm", (r"triangular", r"triu", r"tril", r"trmm", r"trsm"),
                        (r"(?:upper|lower)[\s_-]+triangular",),
                        ("triangular-gemm", "trmm")),
}
FAMILIES: tuple[str, ...] = (*KERNEL_FAMILIES, *OP_FAMILIES)
_OP_WORD_RES = {f: re.compile(r"^(?:" + "|".join(spec[1]) + r")$") for f, spec in OP_FAMILIES.items()}
_OP_PHRASE_RES = {f: re.compile(r"(?<![a-z0-9])(?:" + "|".join(spec[2]) + r")") for f, spec in OP_FAMILIES.items()
                  if spec[2]}

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


def op_families_in(text: str) -> tuple[list[str], str]:
    """The op families a text names (phrases first, then words), in the order they appear, and the text
    with the matched phrases and words blanked out (so "transposed convolution" names no transpose kernel)."""
    low = (text or "").lower()
    found: dict[str, int] = {}
    for fam, rx in _OP_PHRASE_RES.items():
        for m in rx.finditer(low):
            found.setdefault(fam, m.start())
            low = low[:m.start()] + " " * (m.end() - m.start()) + low[m.end():]
    pos = 0
    for word in _SPLIT_RE.split(low):
        if not word:
            continue
        pos = low.find(word, pos)
        for fam, rx in _OP_WORD_RES.items():
            if rx.match(word):
                found.setdefault(fam, pos)
                low = low[:pos] + " " * len(word) + low[pos + len(word):]
                break
        pos += len(word)
    return sorted(found, key=lambda f: (found[f], list(OP_FAMILIES).index(f))), low


@functools.lru_cache(maxsize=4096)
def _title_families(title: str) -> tuple[str, ...]:
    """The op families a page title names (cached: ranking asks for every page on every query)."""
    return tuple(op_families_in(title)[0])


def parent(family: str) -> str:
    """The kernel type an op family falls under (a kernel-type family is its own parent)."""
    return OP_FAMILIES[family][0] if family in OP_FAMILIES else family


def families_for(terms: str, kernel_type: str | None = None, family: str | None = None) -> list[tuple[str, float]]:
    """The families a query asks about, each with its weight: ``family`` when given, then ``kernel_type``
    (not ``any``), then the op families its words or phrases name, then the kernel families its other words
    name; the first weighs 1 (WEAK when only weak words name it), the others WEAK.  An op family brings its
    parent kernel type along (WEAK)."""
    given = [f for f in (family, kernel_type) if f in FAMILIES]
    ops, rest = op_families_in(terms or "")
    named, strong = from_words(rest)
    strong = strong or bool(ops)
    out: dict[str, float] = {}
    for f in given + ops + named:
        for g in (f, parent(f)):
            if g not in out:
                out[g] = WEAK if out or (f not in given and not strong) else 1.0
    return list(out.items())


def of_run(kernel_type: str | None, kernel_name: str | None) -> str | None:
    """A run's family: its kernel type (run.json, ``init --kernel-type``), else what the kernel's name says."""
    if kernel_type in FAMILIES:
        return kernel_type
    named, _ = from_words(kernel_name or "")
    return named[0] if named else None


def kernel_type_of(name: str, ref: Any = None) -> tuple[str, str]:
    """The kernel type (``vocab.KERNEL_TYPES``) a run's name says (its words, as ``of_run`` reads them; an op family's
    type: 'huber_loss' names a loss, a reduction), else ref.py's main op's (``of_ref``), else ``any``; with where it
    came from (init says it: an agent's trial found its run's "any" only in run.json)."""
    ops = op_families_in(name or "")[0]
    for fam, where in ((of_run(None, name), f"the name {name!r}"), (ops[0] if ops else None, f"the name {name!r}"),
                       *[(f, "ref.py's main op") for f in (of_ref(ref) if ref else [])[:1]]):
        if fam and parent(fam) in vocab.KERNEL_TYPES and parent(fam) != "any":
            return parent(fam), f"from {where}" + (f", a {fam}" if fam != parent(fam) else "")
    return "any", f"neither the name {name!r} nor ref.py's ops name a kernel type"


def fit(page: dict[str, Any], family: str) -> float:
    """How squarely a page is about one family (0..1): 0 when it is not, 1 for a page of that family
    alone, less for a page listing several kernel types; ``any`` pages are about no family in particular.
    A page is of an op family when it lists one of the family's tags or its title names the family."""
    if family in OP_FAMILIES:
        tags = page.get("tags")
        if isinstance(tags, list) and any(t in OP_FAMILIES[family][3] for t in tags):
            return 1.0
        return 1.0 if family in _title_families(str(page.get("title", ""))) else 0.0
    types = [t for t in as_list(page.get("kernel_types")) if t != "any"]
    if family == QUANT:
        text = " ".join(as_list(page.get("tags")) + [str(page.get("title", ""))]).lower()
        return 1.0 if _QUANT_PAGE_RE.search(text) else 0.0
    if family not in types:
        return 0.0
    return 1.0 / len(types) ** 0.5


def is_playbook_of(page: dict[str, Any], family: str) -> bool:
    """The family's playbook: the kernel-playbook page whose first kernel type is the family (an op family:
    a kernel-playbook page of that op family)."""
    if family in OP_FAMILIES:
        return page.get("kind") == "kernel-playbook" and fit(page, family) > 0
    types = as_list(page.get("kernel_types"))
    return page.get("kind") == "kernel-playbook" and bool(types) and types[0] == family


# --- the families of a ref.py ------------------------------------------------------------------------------
# module types and torch ops (lower-cased call names, without their torch. / nn. / F. prefix) -> family
_REF_CALLS: tuple[tuple[str, str], ...] = (
    (r"convtranspose[123]d|conv_transpose[123]d", "conv-transpose"),
    (r"conv[123]d", "conv"),
    (r"(?:max|avg|adaptive_?max|adaptive_?avg|lp)_?pool[123]d|(?:max|avg)_pool[123]d", "pooling"),
    (r"lstm|gru|rnn|lstmcell|grucell|rnncell", "rnn"),
    (r"multiheadattention|scaled_dot_product_attention", "attention"),
    (r"bmm|baddbmm", "batched-gemm"),
    (r"linear|matmul|mm|addmm|einsum|tensordot|mv|bilinear", "gemm"),
    (r"\w*loss|cross_entropy|nll_loss|kl_div|mse_loss|l1_loss|smooth_l1_loss|huber_loss|"
     r"triplet_margin_loss|hinge_embedding_loss|margin_ranking_loss|binary_cross_entropy\w*|"
     r"cosine_embedding_loss", "loss"),
    (r"batchnorm[123]d|instancenorm[123]d|groupnorm|batch_norm|instance_norm|group_norm", "spatial-norm"),
    (r"layernorm|layer_norm|rmsnorm|rms_norm|normalize|norm", "norm"),
    (r"cumsum|cumprod|cummax|cummin|logcumsumexp", "scan"),
    (r"argmax|argmin", "argreduce"),
    (r"softmax|log_softmax|logsoftmax", "softmax"),
    (r"sum|mean|amax|amin|max|min|prod|logsumexp|var|std", "reduction"),
    (r"relu|relu6|leaky_relu|leakyrelu|gelu|silu|mish|hardswish|hardsigmoid|hardtanh|sigmoid|tanh|elu|selu|"
     r"celu|softplus|softsign|swish|dropout|clamp|clip|tanhshrink|threshold", "elementwise"),
)
_REF_CALL_RES = tuple((re.compile(r"^(?:" + pat + r")$"), fam) for pat, fam in _REF_CALLS)
# which family leads when a ref holds several: the heavy op, then what is fused around it
_MAIN_ORDER = ("rnn", "ssm", "netvlad", "mbconv", "attention", "linear-attention", "sliding-window",
               "conv-transpose", "depthwise-conv", "conv", "batched-gemm", "gemv", "triangular-gemm", "gemm", "loss",
               "spatial-norm", "norm", "pooling", "scan", "argreduce", "softmax", "moe", "reduction", "transpose",
               "epilogue-fusion", "elementwise", QUANT)
_HEAVY = ("conv-transpose", "depthwise-conv", "conv", "batched-gemm", "gemm", "gemv")


def _call_name(node: Any) -> str | None:
    import ast

    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr.lower()
    if isinstance(f, ast.Name):
        return f.id.lower()
    return None


def _depthwise(node: Any) -> bool:
    """A convolution whose groups= is its first argument (in_channels): depthwise."""
    import ast

    groups = next((k.value for k in node.keywords if k.arg == "groups"), None)
    first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "in_channels"), None)
    return groups is not None and first is not None and ast.dump(groups) == ast.dump(first)


def of_ref_text(text: str) -> list[str]:
    """The families of a ref.py's source, the main one first (see _MAIN_ORDER): its module types and torch
    ops (depthwise for a convolution grouped by its input channels; epilogue-fusion for a GEMM or convolution
    followed by elementwise ops), then the op families its names and docstrings name (MBConv, Mamba,
    NetVLAD, matrix-vector ...)."""
    import ast

    found: dict[str, int] = {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    order = 0
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            found.setdefault("gemm", order)
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        for rx, fam in _REF_CALL_RES if name else ():
            if rx.match(name):
                if fam == "conv" and _depthwise(node):
                    fam = "depthwise-conv"
                found.setdefault(fam, order)
                order += 1
                break
    # the names and docstrings: op families the calls cannot show (a matrix-vector product is a matmul, an
    # MBConv block is convolutions), and kernel families written out by hand (an RMS norm of mean and sqrt)
    named, rest = op_families_in(text)
    words, strong = from_words(rest)
    for fam in named + (words if strong else []):
        if fam not in ("epilogue-fusion", "spatial-norm", "pooling", "conv-transpose", "depthwise-conv"):
            found.setdefault(fam, order)
            order += 1
    if any(f in found for f in _HEAVY) and ("elementwise" in found or "spatial-norm" in found):
        found.setdefault("epilogue-fusion", order)
    return sorted(found, key=lambda f: (_MAIN_ORDER.index(f) if f in _MAIN_ORDER else len(_MAIN_ORDER), found[f]))


def of_ref(path: Any) -> list[str]:
    """``of_ref_text`` of a ref.py file ([] when it cannot be read)."""
    from pathlib import Path

    try:
        return of_ref_text(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []
