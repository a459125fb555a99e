"""Correct Triton vector add."""
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run_kernel(x, y, out, N):
    _add[(triton.cdiv(N, 256),)](x, y, out, N, BLOCK=256)
