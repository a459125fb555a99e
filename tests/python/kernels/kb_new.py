"""KernelBench solution: the same Linear + ReLU computed explicitly."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.clamp_min(x @ self.fc.weight.t() + self.fc.bias, 0.0)
