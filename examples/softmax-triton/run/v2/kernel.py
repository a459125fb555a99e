"""Row softmax for rows too long for one block: an online statistics pass, then a write pass."""
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_long_rows(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    # persistent: one program per SM walks rows pid, pid + nprog, ... so only nprog rows are open
    # at a time and each row is still in L2 when the write pass reads it again
    cols = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), M, tl.num_programs(0)):
        offset = tl.cast(row, tl.int64) * N
        _softmax_row(x_ptr + offset, y_ptr + offset, N, cols, BLOCK)


@triton.jit
def _softmax_row(x_row, y_row, N, cols, BLOCK: tl.constexpr):
    # one online pass: running max per lane, running sum rescaled whenever the max grows
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < N, other=float("-inf"))
        m_new = tl.maximum(m, x)
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # lanes that saw only padding stay at 0
        s = s * tl.exp(m - m_ref) + tl.exp(x - m_ref)
        m = m_new
    row_max = tl.max(m, axis=0)
    row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)

    for start in range(0, N, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < N, other=float("-inf"))
        tl.store(y_row + start + cols, tl.exp(x - row_max) / row_sum, mask=start + cols < N)


def run_kernel(x, y, M, N):
    n_sm = torch.cuda.get_device_properties(x.device).multi_processor_count
    softmax_long_rows[(min(M, n_sm),)](x, y, M, N, BLOCK=4096, num_warps=16)
