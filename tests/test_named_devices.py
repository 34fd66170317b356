"""A factory given a device by name (`torch.zeros(3, device=device)`, `device=self.device`) builds
where the run puts its tensors, as `.to(device)` moves them there: the accelerator, unless the
argument spells the CPU. And `%` formatting with a format string built from literals (YOLO's
`('%11s' * 2 + '%11.4g' * 5) % (epoch, mem, *mloss)`) converts each tensor operand on the host, as
a literal format string does; a remainder of numbers stays silent."""

from __future__ import annotations

import textwrap

from tests.helpers import lint

LOOP = """
import torch
from tqdm import tqdm
from utils import select_device

device = select_device("0")
model = torch.nn.Linear(3, 3).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
pbar = tqdm(enumerate(torch.utils.data.DataLoader(range(10))))
mloss = torch.zeros(3, device=DEVICE)
for i, x in pbar:
    optimizer.zero_grad()
    loss = model(x.to(device)).sum()
    loss.backward()
    optimizer.step()
    pbar.set_description(FORMAT % (f"{i}", "x", *mloss, x.shape[0], 4))
"""


def found(device: str = "device", form: str = "('%11s' * 2 + '%11.4g' * 5)") -> list[int]:
    code = textwrap.dedent(LOOP).replace("DEVICE", device).replace("FORMAT", form)
    return [d.line for d in lint(code, "TL401", name="train.py") if d.code == "TL401"]


def test_a_tensor_built_on_a_named_device_is_read_by_formatting() -> None:
    assert found() == [16]


def test_a_tensor_built_on_an_attribute_device_is_on_the_device() -> None:
    assert found(device="model.weight.device") == [16]


def test_a_tensor_built_on_the_cpu_or_the_default_device_is_not() -> None:
    assert found(device='"cpu"') == []
    assert found(device='torch.device("cpu")') == []
    assert found(device="None") == []


def test_a_literal_format_string_built_with_operators_formats() -> None:
    assert found(form="('%s ' * 2 + '%g')") == [16]


def test_a_remainder_of_numbers_is_no_formatting() -> None:
    assert found(form="(len(pbar) * 2 + 1)") == []
