"""Row softmax over long rows (fp32): y = softmax(x, dim=-1)."""
import torch

atol, rtol = 1e-6, 1e-4   # softmax outputs are ~1/N (1.5e-5 at N=65536): absolute error must be small


def setup(M, N):
    x = torch.randn(M, N, device="cuda", dtype=torch.float32) * 4.0
    y = torch.empty(M, N, device="cuda", dtype=torch.float32)
    return {"inputs": {"x": x, "y": y, "M": M, "N": N}, "outputs": ["y"]}


def reference(x, y, M, N):
    return torch.softmax(x, dim=-1)


def flops(M, N):
    return 4 * M * N          # max, sub, exp, sum/scale per element (rough)


def bytes_moved(M, N):
    return 2 * M * N * 4      # read x once, write y once
