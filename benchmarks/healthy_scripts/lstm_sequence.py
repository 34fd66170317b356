"""An LSTM predicting the next value of noisy sine waves (sequence regression), with gradient clipping."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Forecaster(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(1, 32, batch_first=True)
        self.out = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(x)
        return self.out(h)


model = Forecaster()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(1200):
    phase = torch.rand(32, 1) * 6.28
    freq = 0.5 + torch.rand(32, 1)
    t = torch.arange(41).float() * 0.2
    wave = torch.sin(freq * t + phase) + 0.02 * torch.randn(32, 41)
    x, y = wave[:, :-1, None], wave[:, 1:, None]
    loss = F.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
