"""The fixed version of energy_trainer.py: no retained graphs, syncs and memory stats at log steps only."""

import torch
import torch.nn as nn


class Trainer:
    def __init__(self, model: nn.Module, lr: float = 1e-3, log_every: int = 10):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.log_every = log_every
        self.hidden = None

    def train_step(self, x: torch.Tensor, y: torch.Tensor, step: int) -> torch.Tensor:
        out, hidden = self.model(x, self.hidden)
        self.hidden = hidden.detach()
        loss = nn.functional.mse_loss(out, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.1)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if step % self.log_every == 0:
            self.log(step, loss)
        return loss.detach()

    def log(self, step: int, loss: torch.Tensor) -> None:
        print(f"step {step} loss {loss.item():.4f}")

    def fit(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        for epoch in range(2):
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            for step, (x, y) in enumerate(batches):
                self.train_step(x.to(self.device), y.to(self.device), step)
        print("done")


if __name__ == "__main__":
    trainer = Trainer(nn.GRU(16, 16, batch_first=True))
    trainer.fit([(torch.randn(4, 8, 16), torch.randn(4, 8, 16)) for _ in range(20)])
