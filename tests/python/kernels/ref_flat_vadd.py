"""Vector add without setup(): .cu kernels get flat --ptr-size buffers named after solve()'s parameters."""
import torch


def reference(x, y, out):
    torch.add(x, y, out=out)
