"""`from utils import *` binds what the interpreter binds: the names `utils` lists in `__all__`, else
every public name it defines or imports (`torch`, `nn`, its helpers). A training script that gets
`torch` that way has its torch calls known, and calls the star-imported helpers with their chains; a
function the script defines itself is the one it calls, and a library's star import binds nothing."""

from __future__ import annotations

from pathlib import Path

from tests.test_import_roots import trainlint, write
import json

UTILS = """\
import torch
import torch.nn as nn

__version__ = "1"


def sync_all():
    torch.cuda.synchronize()


def _private():
    pass
"""


def step(body: str, head: str = "from utils import *") -> str:
    """A training script whose loop runs `body` every step."""
    return "\n".join([
        head, "", "", "def fit(model, loader, opt):", "    for x in loader:", "        loss = model(x.cuda()).mean()",
        f"        {body}", "        loss.backward()", "        opt.step()", "        opt.zero_grad()",
    ]) + "\n"


def findings(cwd: Path, *args: str) -> list[tuple[str, int, str, list[str]]]:
    done = trainlint(cwd, ".", "--select", "TL402,TL406", "--output-format", "json", "--no-cache", *args)
    assert done.returncode in (0, 1), done.stderr
    return sorted(
        (Path(d["path"]).name, d["line"], d["code"], [f"{Path(loc['path']).name}:{loc['line']}" for r in d.get("related", []) for loc in r["locations"]])
        for d in json.loads(done.stdout)
    )


def test_torch_bound_by_a_star_import_is_torch(tmp_path: Path) -> None:
    # sgrvinod's SSD tutorial: `from utils import *` is the only way `model.py` gets `torch`
    project = write(tmp_path / "p", {"utils.py": UTILS, "train.py": step('mask = torch.zeros(8).to("cuda")')})
    assert findings(project) == [("train.py", 7, "TL406", [])]


def test_a_helper_bound_by_a_star_import_is_called_with_its_chain(tmp_path: Path) -> None:
    project = write(tmp_path / "p", {"utils.py": UTILS, "train.py": step("sync_all()")})
    assert findings(project) == [("utils.py", 8, "TL402", ["train.py:7"])]
    # through a package's `__init__` that star-imports its module, and a relative star import
    project = write(tmp_path / "q", {
        "lib/__init__.py": "from .utils import *\n", "lib/utils.py": UTILS, "train.py": step("sync_all()", "from lib import *"),
    })
    assert findings(project) == [("utils.py", 8, "TL402", ["train.py:7"])]


def test_names_the_script_binds_itself_or_the_module_keeps_back_are_not_the_star_imports(tmp_path: Path) -> None:
    # near misses: the script's own `sync_all` is the one it calls; `__all__` leaves `torch` out (the
    # script imports torch itself, under another name); a library's star import binds nothing here
    own = step("sync_all()") + "\n\ndef sync_all():\n    pass\n"
    listed = "__all__ = ['helper']\n" + UTILS + "\n\ndef helper():\n    pass\n"
    project = write(tmp_path / "p", {"utils.py": UTILS, "train.py": own})
    assert findings(project) == []
    project = write(tmp_path / "q", {
        "utils.py": listed, "train.py": step("mask = torch.zeros(8).to('cuda')\n        sync_all()", "import numpy as torch\nfrom utils import *"),
    })
    assert findings(project) == []
    project = write(tmp_path / "r", {"train.py": step("mask = Tensor(8).cuda()", "from torch import *")})
    assert findings(project) == []


LOSSES = """\
import torch.nn as nn
import torch.nn.functional as F


class Loss2d(nn.Module):
    def forward(self, x, y):
        return F.nll_loss(F.log_softmax(x, 1), y)


class Meter:
    def update(self, value):
        self.value = value
"""


def legacy_reads(cwd: Path) -> list[tuple[str, int]]:
    done = trainlint(cwd, ".", "--select", "TL401", "--output-format", "json", "--no-cache")
    assert done.returncode in (0, 1), done.stderr
    return sorted((Path(d["path"]).name, d["line"]) for d in json.loads(done.stdout))


def test_a_class_a_package_re_exports_by_a_star_import_is_known_where_it_is_imported_by_name(tmp_path: Path) -> None:
    # pytorch-semantic-segmentation: `utils/__init__.py` is `from .misc import *` (no torch of its own);
    # `from utils import CrossEntropyLoss2d` is a module, so the loss it gives the step (its caller's
    # argument) is a tensor and `.data[0]` reads it
    train = "\n".join([
        "from utils import Loss2d, Meter", "", "", "def fit(model, loader, criterion, opt):", "    meter = Meter()",
        "    for x, y in loader:", "        out = model(x.cuda())", "        main_loss = criterion(out, y.cuda())",
        "        (main_loss + 0.4 * out.pow(2).mean()).backward()", "        opt.step()", "        meter.update(main_loss.data[0])", "", "",
        "def main(model, loader, opt):", "    fit(model, loader, Loss2d().cuda(), opt)", "",
    ])
    project = write(tmp_path / "p", {"utils/__init__.py": "from .misc import *\n", "utils/misc.py": LOSSES, "train.py": train})
    assert legacy_reads(project) == [("train.py", 11)]
    # near miss: the module's `__all__` keeps the class back, so the package offers no `Loss2d` to know
    project = write(tmp_path / "q", {"utils/__init__.py": "from .misc import *\n", "utils/misc.py": "__all__ = ['Meter']\n" + LOSSES, "train.py": train})
    assert legacy_reads(project) == []


METRICS = """\
import torch
import torch.nn as nn


class AddMargin(nn.Module):
    def forward(self, x, label):
        return x - 0.35


class ArcMargin(nn.Module):
    def forward(self, x, label):
        return x.cos()


class Sphere(nn.Module):
    def forward(self, x, label):
        one_hot = torch.zeros(x.size()).cuda()
        return x + one_hot
"""
ARCFACE = """\
import torch
import torch.nn as nn
from models import *

if opt.metric == 'add_margin':
    metric_fc = AddMargin()
elif opt.metric == 'arc_margin':
    metric_fc = ArcMargin()
elif opt.metric == 'sphere':
    metric_fc = Sphere()
else:
    metric_fc = nn.Linear(512, 10)
metric_fc.to(device)
metric_fc = nn.DataParallel(metric_fc)
for data, label in loader:
    output = metric_fc(model(data.cuda()), label.cuda())
    loss = output.mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_python_2_package_re_exports_its_modules_by_implicit_relative_star_imports(tmp_path: Path) -> None:
    # arcface-pytorch: `models/__init__.py` is `from metrics import *` (Python 2: the module beside it);
    # the script picks one of its margin layers by a setting, wraps it in DataParallel and runs it
    # every step, so each candidate's forward runs per step
    files = {"models/__init__.py": "from metrics import *\n", "models/metrics.py": METRICS, "train.py": ARCFACE}
    assert findings(write(tmp_path / "p", files)) == [("metrics.py", 17, "TL406", ["train.py:16"])]
    # near miss: nine layers to choose from are more than the analysis follows (a registry's worth)
    extra = [f"Cos{n}" for n in range(5)]
    more = {**files, "models/metrics.py": METRICS + "".join(f"\n\nclass {c}(nn.Module):\n    def forward(self, x, label):\n        return x\n" for c in extra),
            "train.py": ARCFACE.replace("else:", "".join(f"elif opt.metric == '{c}':\n    metric_fc = {c}()\n" for c in extra) + "else:")}
    assert findings(write(tmp_path / "q", more)) == []


def test_a_name_a_sibling_module_star_imports_from_the_package_above_is_the_one_it_binds(tmp_path: Path) -> None:
    # DeepRL: `agent/ddpg.py` gets `sync_all` through `from .base import *`, whose `from ..utils import *`
    # names the package above both; a package beside them, star-importing the same way, binds it too
    train = step("sync_all()", "from .base import *").replace("def fit(", "def fit_ddpg(")
    files = {
        "rl/__init__.py": "", "rl/utils/__init__.py": "from .torch_utils import *\n", "rl/utils/torch_utils.py": UTILS,
        "rl/agent/__init__.py": "", "rl/agent/base.py": "import torch\nfrom ..utils import *\n", "rl/agent/ddpg.py": train,
    }
    project = write(tmp_path / "p", files)
    assert findings(project) == [("torch_utils.py", 8, "TL402", ["ddpg.py:7"])]
    # near miss: a sibling whose own star import names a package the importer is not in binds nothing here
    files["rl/agent/base.py"] = "import torch\n"
    project = write(tmp_path / "q", files)
    assert findings(project) == []
