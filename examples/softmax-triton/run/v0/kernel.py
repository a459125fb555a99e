"""Row softmax for rows too long for one block: three passes over each row (max, sum, write)."""
import triton
import triton.language as tl


@triton.jit
def softmax_long_rows(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * N
    y_row = y_ptr + row.to(tl.int64) * N
    cols = tl.arange(0, BLOCK)

    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < N, other=float("-inf"))
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)

    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < N, other=float("-inf"))
        s += tl.exp(x - row_max)
    row_sum = tl.sum(s, axis=0)

    for start in range(0, N, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < N, other=float("-inf"))
        tl.store(y_row + start + cols, tl.exp(x - row_max) / row_sum, mask=start + cols < N)


def run_kernel(x, y, M, N):
    softmax_long_rows[(M,)](x, y, N, BLOCK=1024, num_warps=4)
