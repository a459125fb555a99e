"""Broken: launches but only writes the first half of the output."""
import triton
import triton.language as tl


@triton.jit
def _half(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n // 2
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run_kernel(x, y, out, N):
    _half[(triton.cdiv(N, 256),)](x, y, out, N, BLOCK=256)
