"""A CIFAR-sized CNN trained with fp16 mixed precision and no gradient clipping (field report 003)."""

import torch
import torch.nn as nn


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10),
    )


def train(epochs: int = 2, steps_per_epoch: int = 20) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = make_model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(device.type)
    images = torch.randn(256, 3, 32, 32)
    labels = torch.randint(0, 10, (256,))
    for epoch in range(epochs):
        model.train()
        for i in range(steps_per_epoch):
            idx = torch.randint(0, 256, (32,))
            x, y = images[idx].to(device), labels[idx].to(device)
            optimizer.zero_grad()
            with torch.autocast(device_type=device.type, dtype=torch.float16):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if i % 10 == 0:
                print(f"epoch {epoch} step {i} loss {loss.item():.3f}")


if __name__ == "__main__":
    train()
