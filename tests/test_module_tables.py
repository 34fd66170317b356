"""A factory that dispatches through a dict of modules (`method_dict[cfg['method']].config.get_trainer(...)`,
the autonomousvision style: `method_dict = {'gan2d': gan2d, 'giraffe': giraffe}`) builds what the same
function of each of those modules builds: the project's own definitions bound the choice, as for a
dict of classes. A method called on what it returns (`trainer.train_step(batch)`) runs what every
candidate's method does, so the loop calling it steps; a table holding anything but modules, or a
module whose function builds no project class, says nothing."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

CONFIG = """\
from pkg import gan, nerf

method_dict = {
    "gan": gan,
    "nerf": nerf,
}


def get_trainer(model, optimizer, cfg):
    method = cfg["method"]
    trainer = method_dict[method].config.get_trainer(model, optimizer, cfg)
    return trainer
"""

METHOD_CONFIG = """\
from pkg.{name} import training


def get_trainer(model, optimizer, cfg):
    trainer = training.Trainer(model, optimizer)
    return trainer
"""

TRAINING = """\
class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def train_step(self, batch):
        self.optimizer.zero_grad()
        loss = self.model(batch).mean()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.detach()}
"""

TRAIN = """\
import torch
from pkg import config

model = torch.nn.Linear(4, 4).cuda()
optimizer = torch.optim.Adam(model.parameters())
trainer = config.get_trainer(model, optimizer, {"method": "gan"})
for batch in torch.utils.data.DataLoader(range(10)):
    out = trainer.train_step(batch)
    torch.cuda.synchronize()
"""


def _files(config: str = CONFIG, nerf_config: str = METHOD_CONFIG, training: str = TRAINING) -> dict[str, str]:
    files = {"pyproject.toml": "", "pkg/__init__.py": "", "pkg/config.py": config, "train.py": TRAIN}
    for name in ("gan", "nerf"):
        files[f"pkg/{name}/__init__.py"] = f"from pkg.{name} import config, training\n"
        files[f"pkg/{name}/config.py"] = (nerf_config if name == "nerf" else METHOD_CONFIG).format(name=name)
        files[f"pkg/{name}/training.py"] = training
    return files


def _lint(tmp_path: Path, files: dict[str, str]) -> list[str]:
    for path in files:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    return lint_project(tmp_path, files, "TL402")


def test_a_method_of_what_a_dict_of_modules_builds_steps(tmp_path: Path) -> None:
    assert _lint(tmp_path, _files()) == ["train.py:9:TL402"]


def test_a_table_holding_a_function_says_nothing(tmp_path: Path) -> None:
    config = CONFIG.replace('    "nerf": nerf,\n', '    "nerf": make,\n').replace("from pkg import gan, nerf\n", "from pkg import gan\n\n\ndef make(model, optimizer, cfg):\n    return None\n")
    assert _lint(tmp_path, _files(config=config)) == []


def test_a_module_building_a_library_object_says_nothing(tmp_path: Path) -> None:
    library = "import lightning\n\n\ndef get_trainer(model, optimizer, cfg):\n    trainer = lightning.Trainer(model)\n    return trainer\n"
    assert _lint(tmp_path, _files(nerf_config=library)) == []


def test_candidates_whose_method_does_not_step_make_no_step_loop(tmp_path: Path) -> None:
    evaluating = TRAINING.replace("        loss.backward()\n        self.optimizer.step()\n", "")
    assert _lint(tmp_path, _files(training=evaluating)) == []
