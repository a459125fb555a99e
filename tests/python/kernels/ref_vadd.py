"""Vector add: out = x + y (in place into out)."""
import torch


def setup(N):
    x = torch.randn(N, dtype=torch.float32)
    y = torch.randn(N, dtype=torch.float32)
    out = torch.empty(N, dtype=torch.float32)
    return {"inputs": {"x": x, "y": y, "out": out, "N": N}, "outputs": ["out"]}


def reference(x, y, out):
    torch.add(x, y, out=out)


def flops(N):
    return N


def bytes_moved(N):
    return 12 * N
