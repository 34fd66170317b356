"""The branch for a batch with nothing in it (`if len(tgt_boxes) == 0:` in DN-DETR's denoising losses,
returning `torch.as_tensor(0.).to('cuda')`) runs on the rare steps whose data says so, not on every
step; an exit on such a test (`if len(boxes) == 0: continue`) leaves the rest to all the other steps,
and an empty tensor (`torch.tensor([]).to('cuda')`) copies nothing."""

from __future__ import annotations

from tests.helpers import lines

LOSS = """\
import torch


def box_loss(src_boxes, tgt_boxes):
    if len(tgt_boxes) == 0:
        return torch.as_tensor(0.).to('cuda')
    return (src_boxes - tgt_boxes).abs().mean()


for x, boxes in loader:
    out = model(x.cuda())
    loss = box_loss(out, boxes.cuda())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_the_branch_for_empty_data_is_not_every_step() -> None:
    assert lines(LOSS, "TL406") == []
    assert lines(LOSS.replace("if len(tgt_boxes) == 0:", "if tgt_boxes.numel() == 0:"), "TL406") == []


def test_the_same_copy_outside_the_branch_is_every_step() -> None:
    ungated = LOSS.replace("    if len(tgt_boxes) == 0:\n        return torch.as_tensor(0.).to('cuda')\n", "    zero = torch.as_tensor(0.).to('cuda')\n")
    assert lines(ungated, "TL406") == [5]


def test_an_exit_on_empty_data_leaves_the_rest_to_the_other_steps() -> None:
    code = """\
import torch

for x, boxes in loader:
    if len(boxes) == 0:
        continue
    out = model(x.cuda())
    print(out.sum().item())
    out.sum().backward()
    optimizer.step()
"""
    assert lines(code, "TL401") == [7]
    assert lines(code.replace("if len(boxes) == 0:", "if not len(boxes):"), "TL401") == [7]


def test_an_empty_tensor_copies_nothing() -> None:
    code = """\
import torch

for x in loader:
    idx = torch.tensor([]).to('cuda')
    pad = torch.tensor([0.5]).to('cuda')
    model(x.cuda(), idx, pad).backward()
    optimizer.step()
"""
    assert lines(code, "TL406") == [5]
