"""RMSNorm over the last dim: y = x / sqrt(mean(x^2) + eps) * w."""
import torch

EPS = 1e-6


def setup(M, N):
    x = torch.randn(M, N, dtype=torch.float32)
    w = torch.rand(N, dtype=torch.float32) + 0.5
    y = torch.empty(M, N, dtype=torch.float32)
    return {"inputs": {"x": x, "w": w, "y": y, "M": M, "N": N}, "outputs": ["y"]}


def reference(x, w, y):
    y.copy_(x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * w)
