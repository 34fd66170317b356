"""The fixed version of cifar_fp16.py: unscale, then clip, then step."""

import torch
import torch.nn as nn


def train(epochs: int = 2, steps_per_epoch: int = 20, max_norm: float = 1.0) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(device.type)
    images, labels = torch.randn(256, 3, 32, 32), torch.randint(0, 10, (256,))
    for epoch in range(epochs):
        model.train()
        epoch_loss = torch.zeros((), device=device)
        for i in range(steps_per_epoch):
            idx = torch.randint(0, 256, (32,))
            x, y = images[idx].to(device, non_blocking=True), labels[idx].to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device.type, dtype=torch.float16):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            epoch_loss += loss.detach()
        print(f"epoch {epoch} loss {epoch_loss.item() / steps_per_epoch:.3f}")


if __name__ == "__main__":
    train()
