"""Broken: writes zeros."""
import triton
import triton.language as tl


@triton.jit
def _zeros(o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(o_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def run_kernel(x, y, out, N):
    _zeros[(triton.cdiv(N, 256),)](out, N, BLOCK=256)
