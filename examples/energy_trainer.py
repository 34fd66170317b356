"""A trainer in the style of field report 004: OOM on batch 2 and every batch after the first slower.

It backpropagates with `retain_graph=True` while keeping every step's loss (and so its graph) in
`self.history`, reads `.item()` on every step, and resets CUDA memory statistics on every step.
"""

import torch
import torch.nn as nn


class EnergyTrainer:
    def __init__(self, model: nn.Module, lr: float = 1e-3, accumulation_steps: int = 2):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.accumulation_steps = accumulation_steps
        self.hidden = None
        self.history = []

    def train_step(self, x: torch.Tensor, y: torch.Tensor, step: int) -> float:
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        out, hidden = self.model(x, self.hidden)
        self.hidden = hidden.detach()
        loss = nn.functional.mse_loss(out, y) / self.accumulation_steps
        loss.backward(retain_graph=True)
        self.history.append(loss)
        if (step + 1) % self.accumulation_steps == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()
        return loss.item()

    def fit(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        for step, (x, y) in enumerate(batches):
            x, y = x.to(self.device), y.to(self.device)
            self.train_step(x, y, step)


def main(steps: int = 20) -> None:
    torch.manual_seed(0)
    model = nn.GRU(16, 16, batch_first=True)
    trainer = EnergyTrainer(model)
    batches = [(torch.randn(4, 8, 16), torch.randn(4, 8, 16)) for _ in range(steps)]
    trainer.fit(batches)
    print(f"final loss {trainer.history[-1].item():.4f}")


if __name__ == "__main__":
    main()
