"""Out-of-place matrix transpose (fp32): y[N, M] = x[M, N]^T."""
import torch


def setup(M, N):
    x = torch.randn(M, N, device="cuda", dtype=torch.float32)
    y = torch.empty(N, M, device="cuda", dtype=torch.float32)
    return {"inputs": {"x": x, "y": y, "M": M, "N": N}, "outputs": ["y"]}


def reference(x, y, M, N):
    y.copy_(x.t())


def bytes_moved(M, N):
    return 2 * M * N * 4      # read x once, write y once
