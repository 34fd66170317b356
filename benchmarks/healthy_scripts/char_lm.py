"""A tiny character-level transformer language model on a repetitive text, AdamW with gradient
clipping and a causal mask."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
text = " ".join(["the model learns to predict the next character of this text"] * 200)
chars = sorted(set(text))
data = torch.tensor([chars.index(c) for c in text])
VOCAB, BLOCK, WIDTH = len(chars), 16, 32


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.zeros(BLOCK, WIDTH))
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 2 * WIDTH, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1])
        h = self.blocks(self.embed(idx) + self.position[: idx.shape[1]], mask=mask, is_causal=True)
        return self.head(h)


model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
for step in range(1200):
    starts = torch.randint(0, len(data) - BLOCK - 1, (8,))
    x = torch.stack([data[s:s + BLOCK] for s in starts])
    y = torch.stack([data[s + 1:s + BLOCK + 1] for s in starts])
    loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
