"""A read of a device value right after an `if` that read device values waits for nothing more: the
test drained the queue. The rest of the block after such an `if` exits early (`if loss == 0:
continue`) is such a place only until the step queues device work again: after `loss.backward()` and
`optimizer.step()`, `float(loss)` waits for both (the retinanet and EfficientDet loops)."""

from __future__ import annotations

from tests.helpers import lines

SKIP_ZERO_LOSS = """
import torch


def train(model, loader, optimizer, history):
    for imgs, annot in loader:
        cls_loss, reg_loss = model(imgs.cuda(), annot.cuda())
        loss = cls_loss.mean() + reg_loss.mean()
        if bool(loss == 0):
            continue
        loss.backward()
        optimizer.step()
        history.append(float(loss))
        optimizer.zero_grad()
"""


def test_a_read_after_the_step_queued_work_since_the_test_waits_again() -> None:
    assert lines(SKIP_ZERO_LOSS, "TL401") == [9, 13]


def test_a_read_right_after_the_test_waits_for_nothing_more() -> None:
    code = SKIP_ZERO_LOSS.replace("        history.append(float(loss))\n", "").replace(
        "            continue\n", "            continue\n        history.append(float(loss))\n"
    )
    assert lines(code, "TL401") == [9]


def test_an_else_branch_of_the_test_stays_after_it() -> None:
    code = SKIP_ZERO_LOSS.replace("        history.append(float(loss))\n", "").replace(
        "            continue\n", "            pass\n        else:\n            history.append(float(loss))\n"
    )
    assert lines(code, "TL401") == [9]


def test_a_scheduler_step_queues_nothing_on_the_device() -> None:
    # `scheduler.step()` between the test and the read changes a learning rate on the host: the read
    # still waits for nothing (the optimizer's step, after it, would queue work again)
    code = SKIP_ZERO_LOSS.replace("        history.append(float(loss))\n", "").replace(
        "            continue\n", "            continue\n        scheduler.step()\n        history.append(float(loss))\n"
    ).replace("def train(model, loader, optimizer, history):", "def train(model, loader, optimizer, history, scheduler):")
    assert lines(code, "TL401") == [9]
