"""Functions handed to torchnet's `Engine`: `engine.train(h, loader, epochs, optimizer)` runs the network
function `h` and the hooks `on_sample`, `on_forward` and `on_update` for every sample, with backward
and the optimizer's step between them (attention transfer's and wide ResNets' training scripts). The
epoch hooks run once per epoch, and an `Engine` of another package says nothing of when it calls."""

from __future__ import annotations

from tests.helpers import lines

SCRIPT = """
import torch
import torch.nn.functional as F
import torchnet as tnt
from torchnet.engine import Engine


def main(model, train_loader, optimizer):
    model.cuda()
    meter_loss = tnt.meter.AverageValueMeter()
    meters_at = [tnt.meter.AverageValueMeter() for i in range(3)]

    def h(sample):
        inputs, targets = sample[0].cuda(), sample[1].cuda()
        y, groups = model(inputs)
        groups = [g.sum() for g in groups]
        [m.add(g.item()) for m, g in zip(meters_at, groups)]
        return F.cross_entropy(y, targets), y

    def on_forward(state):
        meter_loss.add(state['loss'].item())

    def on_end_epoch(state):
        print(state['loss'].item())

    engine = Engine()
    engine.hooks['on_forward'] = on_forward
    engine.hooks['on_end_epoch'] = on_end_epoch
    engine.train(h, train_loader, 10, optimizer)
"""


def _line(text: str) -> int:
    return SCRIPT.splitlines().index(text) + 1


def test_the_network_function_and_per_sample_hooks_run_every_step() -> None:
    assert lines(SCRIPT, "TL401") == [
        _line("        [m.add(g.item()) for m, g in zip(meters_at, groups)]"),
        _line("        meter_loss.add(state['loss'].item())"),
    ]


def test_an_engine_of_another_package_makes_no_step() -> None:
    other = SCRIPT.replace("from torchnet.engine import Engine", "from mylib.engine import Engine")
    assert lines(other, "TL401") == []


def test_a_hook_registered_for_the_epoch_only_is_not_per_step() -> None:
    epoch_only = SCRIPT.replace("engine.hooks['on_forward'] = on_forward", "engine.hooks['on_start_epoch'] = on_forward")
    assert lines(epoch_only, "TL401") == [_line("        [m.add(g.item()) for m, g in zip(meters_at, groups)]")]
