"""Writes a TorchScript model whose forward() never returns (a loop without end) to argv[1]:
the hostile job of tst_hostile's anEndlessModelFailsItsJobAndStallsNothing."""
import sys

import torch


class Endless(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)

    def forward(self, x):
        i = 0
        while i >= 0:
            i = i + 1
        return self.fc(x.flatten(1))


torch.jit.script(Endless()).save(sys.argv[1])
