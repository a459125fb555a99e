"""Broken: copies its first input to the output."""
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def run_kernel(x, y, out, N):
    _copy[(triton.cdiv(N, 256),)](x, out, N, BLOCK=256)
