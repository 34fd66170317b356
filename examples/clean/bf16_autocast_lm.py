"""The fixed version of bf16_lm.py: fp32 parameters, bf16 compute under autocast, gated logging."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, targets):
        logits = self.head(self.norm(self.embed(idx)))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def main(steps: int = 200, log_interval: int = 50) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = TinyLM().to(device)  # parameters stay fp32
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = torch.randint(0, 256, (64, 33), device=device)
    running = torch.zeros((), device=device)
    for step in range(steps):
        batch = data[torch.randint(0, 64, (8,), device=device)]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        running += loss.detach()
        if step % log_interval == 0:
            print(f"step {step} loss {running.item() / log_interval:.4f}")
            running.zero_()
    print(f"final loss {loss.item():.4f}")


@torch.no_grad()
def generate(model: TinyLM, prompt: torch.Tensor) -> torch.Tensor:
    """Inference in bf16 is fine: nothing is trained."""
    model = model.to(torch.bfloat16).eval()
    return model.head(model.norm(model.embed(prompt))).argmax(-1)


if __name__ == "__main__":
    main()
