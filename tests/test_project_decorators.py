"""A project's decorator factory that runs what it decorates without grad (YOLO's
`@smart_inference_mode()`, returning `(torch.inference_mode if ok else torch.no_grad)()(fn)`) turns
autograd off in the validation it decorates, as `@torch.no_grad()` does; a decorator of the project
that wraps otherwise (a timer) leaves it on."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint_project

TORCH_UTILS = """\
import functools
import time
import torch


def smart_inference_mode(torch_1_9=True):
    def decorate(fn):
        return (torch.inference_mode if torch_1_9 else torch.no_grad)()(fn)

    return decorate


def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.time()
        out = fn(*args, **kwargs)
        print(time.time() - start)
        return out

    return wrapper
"""

VAL = """\
from utils.torch_utils import smart_inference_mode


@smart_inference_mode()
def run(model, loader):
    model.eval()
    total = 0.0
    for x, y in loader:
        out = model(x.cuda())
        total += (out.argmax(1) == y.cuda()).float().sum()
    return total
"""

TRAIN = """\
import torch
import val


def main(loader):
    model = torch.nn.Linear(4, 4).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        model.train()
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()
        val.run(model, loader)
"""


def _lint(tmp_path: Path, val: str) -> list[str]:
    (tmp_path / "utils").mkdir()
    files = {"utils/__init__.py": "", "utils/torch_utils.py": TORCH_UTILS, "val.py": val, "train.py": TRAIN}
    return lint_project(tmp_path, files, "TL303")


def test_a_decorator_factory_applying_inference_mode_turns_grad_off(tmp_path: Path) -> None:
    assert _lint(tmp_path, VAL) == []


def test_a_decorator_that_wraps_otherwise_leaves_grad_on(tmp_path: Path) -> None:
    val = VAL.replace("smart_inference_mode", "timed").replace("@timed()", "@timed")
    assert _lint(tmp_path, val) == ["val.py:9:TL303"]
