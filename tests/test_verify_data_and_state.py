"""`trainlint verify run` measures two more invariants on the script's own run: DataLoader workers that
draw the same numbers from a generator the dataset owns (TLR701), and a module evaluated before the
state that training-mode forwards build (legacy spectral norm, TLR504). Each violation is named with
its line and evidence; its clean twin (reseeded per worker, the parametrized spectral norm, a loaded
checkpoint) reports no problem."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import verify_run_json

pytest.importorskip("torch")

AUGMENTED = """\
    import sys
    import numpy as np
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset


    class RandomCrops(Dataset):
        \"\"\"Random crops drawn from the dataset's own generator.\"\"\"

        def __init__(self, n=256):
            self.labels = torch.randint(0, 2, (n,))
            self.images = torch.randn(n, 3, 12, 12) + self.labels.view(-1, 1, 1, 1).float()
            self.rng = {generator}

        def __len__(self):
            return len(self.images)

        def __getitem__(self, i):
            top, left = {draw}
            return self.images[i, :, top:top + 8, left:left + 8], self.labels[i]


    def reseed(worker_id):
        info = torch.utils.data.get_worker_info()
        info.dataset.rng = {reseeded}


    def main():
        loader = DataLoader(RandomCrops(), batch_size=16, shuffle=True, num_workers=2, worker_init_fn={init_fn})
        model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


    if __name__ == "__main__":
        main()
"""
NUMPY = {"generator": "np.random.default_rng(0)", "draw": "self.rng.integers(0, 5, size=2)", "reseeded": "np.random.default_rng(info.seed)"}
TORCH = {
    "generator": "torch.Generator().manual_seed(0)", "draw": "torch.randint(0, 5, (2,), generator=self.rng).tolist()",
    "reseeded": "torch.Generator().manual_seed(info.seed)",
}


def _script(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.mark.parametrize("generator", [NUMPY, TORCH], ids=["numpy", "torch"])
def test_workers_drawing_the_same_numbers_are_named_with_the_loader_and_attribute(tmp_path: Path, generator: dict[str, str]):
    code, report = verify_run_json(_script(tmp_path, AUGMENTED.format(init_fn="None", **generator)), "--steps", "40", cwd=tmp_path)
    (problem,) = [p for p in report["problems"] if p["code"] == "TLR701"]
    assert code == 1 and problem["line"] == 30 and problem["path"].endswith("train.py")
    assert "`dataset.rng`" in problem["message"] and "of the RandomCrops in the DataLoader built at train.py:30" in problem["message"]
    assert "copied into its 2 workers with the same state" in problem["message"] and "no worker_init_fn reseeds it" in problem["message"]
    # without persistent workers every epoch starts the copies from the same state again
    assert "each epoch starts it from the same state" in problem["message"]
    assert problem["url"].endswith("rules/run/TLR701-workers-share-random-state.md")


@pytest.mark.parametrize("generator", [NUMPY, TORCH], ids=["numpy", "torch"])
def test_workers_reseeded_per_worker_are_not_a_problem(tmp_path: Path, generator: dict[str, str]):
    code, report = verify_run_json(_script(tmp_path, AUGMENTED.format(init_fn="reseed", **generator)), "--steps", "40", cwd=tmp_path)
    assert code == 0 and report["problems"] == [], report["problems"]
    assert report["data_workers"][0]["worker_init_fn"] == "reseed" and report["data_workers"][0]["generators"] == []


def test_the_global_generators_and_an_unused_generator_are_not_a_problem(tmp_path: Path):
    # torch reseeds the global generators per worker; a generator that no worker draws from does no harm
    text = AUGMENTED.format(init_fn="None", generator="np.random.default_rng(0)", draw="np.random.randint(0, 5, size=2)", reseeded="None")
    code, report = verify_run_json(_script(tmp_path, text), "--steps", "40", cwd=tmp_path)
    assert code == 0 and report["problems"] == [], report["problems"]


SPECTRAL_GAN = """\
    import torch
    from torch import nn
    from torch.nn.utils import spectral_norm
    from torch.nn.utils.parametrizations import spectral_norm as parametrized_spectral_norm


    class Critic(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential({sn}(nn.Linear(16, 64)), nn.LeakyReLU(0.2), {sn}(nn.Linear(64, 1)))

        def forward(self, x):
            return self.net(x)


    def critic_gap(critic, real, fake):
        critic.eval()
        with torch.no_grad():
            gap = (critic(real).mean() - critic(fake).mean()).item()
        critic.train()
        return gap


    torch.manual_seed(0)
    generator = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 16))
    critic = Critic()
    {restore}
    opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_c = torch.optim.Adam(critic.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real_data = torch.randn(512, 16) * 0.5 + 1.0
    print("gap before training", critic_gap(critic, real_data[:64], generator(torch.randn(64, 8)).detach()))
    for step in range(100):
        real = real_data[torch.randint(0, 512, (32,))]
        fake = generator(torch.randn(32, 8))
        c_loss = torch.relu(1 - critic(real)).mean() + torch.relu(1 + critic(fake.detach())).mean()
        opt_c.zero_grad()
        c_loss.backward()
        opt_c.step()
        g_loss = -critic(fake).mean()
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
"""


def test_a_legacy_spectral_norm_critic_evaluated_before_training_is_named_with_its_figures(tmp_path: Path):
    code, report = verify_run_json(_script(tmp_path, SPECTRAL_GAN.format(sn="spectral_norm", restore="")), "--steps", "20", cwd=tmp_path)
    (problem,) = [p for p in report["problems"] if p["code"] == "TLR504"]
    assert code == 1 and problem["line"] == 10  # where spectral_norm was applied: the fix goes there
    message = problem["message"]
    assert message.startswith("evaluated before training: `net.0`, `net.2` (Linear) carry the legacy `spectral_norm` applied at train.py:10")
    assert "switched to eval at train.py:17 (`critic.eval()`) before the first step" in message
    assert "is divided by u^T W v = " in message and "instead of its largest singular value" in message
    rows = report["evaluated_before_training"]
    assert all(abs(r["sigma_used"]) < 0.5 * r["sigma_true"] for r in rows)  # random vectors: far from the norm


@pytest.mark.parametrize("sn, restore", [
    ("parametrized_spectral_norm", ""),  # runs 15 power iterations when applied
    ("spectral_norm", "critic.load_state_dict(Critic().state_dict())"),  # a checkpoint brings the vectors
], ids=["parametrized", "loaded"])
def test_spectral_norm_whose_state_is_built_or_loaded_is_not_a_problem(tmp_path: Path, sn: str, restore: str):
    code, report = verify_run_json(_script(tmp_path, SPECTRAL_GAN.format(sn=sn, restore=restore)), "--steps", "20", cwd=tmp_path)
    assert report["evaluated_before_training"] == [] and not [p for p in report["problems"] if p["code"] == "TLR504"], report["problems"]
    assert code == 0, report["problems"]
