"""Tests that look like gates and hold on every training step. A flag of periodic work negated is no gate: `if not cross_valid:` in an epoch function that trains or
validates as its flag says is the training pass, run on every step (Conv-TasNet's solver plots each
step's loss under `if self.visdom_epoch and not cross_valid:`). An early exit on a negated flag (`if not
do_log: return`) still leaves the rest to the flag's steps. A presence test written `if not writer is None:`
is one, as `if writer is not None:` is; and a remainder of a rank (`args.rank % ngpus_per_node == 0`, the first
process of each node, FixMatch's logging) is a rank test, not a periodic one."""

from __future__ import annotations

from tests.helpers import lines

SOLVER = """
import torch


class Solver:
    def __init__(self, model, optimizer, visdom_epoch):
        self.model = model.cuda()
        self.optimizer = optimizer
        self.visdom_epoch = visdom_epoch

    def run_one_epoch(self, loader, cross_valid=False):
        losses = torch.zeros(len(loader))
        for i, (x, y) in enumerate(loader):
            x, y = x.cuda(), y.cuda()
            loss = (self.model(x) - y).pow(2).mean()
            if not cross_valid:
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            if self.visdom_epoch and not cross_valid:
                losses[i] = loss.item()
            if cross_valid:
                print(loss.item())
            self.report(loss)

    def report(self, loss):
        if not self.do_log:
            return
        print(loss.item())
"""


def test_a_negated_flag_of_periodic_work_runs_on_every_training_step() -> None:
    # line 21: the plot of every training step; line 23 is the validation pass; `report` exits unless logging
    assert lines(SOLVER, "TL401") == [21]


def test_the_flag_itself_still_gates() -> None:
    gated = SOLVER.replace("if self.visdom_epoch and not cross_valid:", "if self.visdom_epoch and cross_valid:")
    assert lines(gated, "TL401") == []


LOGGER = """
import torch


def train(model, loader, optimizer, args, tb_log, ngpus_per_node):
    model.cuda()
    for x, y in loader:
        loss = model(x.cuda(), y.cuda())
        loss.backward()
        optimizer.step()
        if not args.distributed or (args.distributed and args.rank % ngpus_per_node == 0):
            if not tb_log is None:
                tb_log.add_scalar("loss", loss.item())
"""


def test_a_negated_presence_test_and_a_rank_remainder_gate_nothing() -> None:
    assert lines(LOGGER, "TL401") == [13]
    periodic = LOGGER.replace("args.rank % ngpus_per_node == 0", "args.step % args.log_every == 0")
    assert lines(periodic, "TL401") == []


LATCH = """
import torch


class Trainer:
    def __init__(self, model, optimizer, dry_run):
        self.model = model.cuda()
        self.optimizer = optimizer
        self.dry_run = dry_run
        self.log_image_flag = False

    def fit(self, loader):
        for img, label in loader:
            img, label = img.cuda(), label.cuda()
            loss = torch.nn.functional.cross_entropy(self.model(img), label)
            loss.backward()
            self.optimizer.step()
            if not self.log_image_flag and not self.dry_run:
                self.log_image_flag = True
                print(img.detach().cpu())
"""


def test_a_negated_flag_the_body_sets_runs_once() -> None:
    assert lines(LATCH, "TL401") == []
    # the flag left unset: the image is copied to the host on every step
    assert lines(LATCH.replace("self.log_image_flag = True", "pass"), "TL401") == [20]


# an episode's end is a gate: an A3C worker rebuilds its LSTM state only after an episode ends
A3C_WORKER = """
import torch


def train(player, optimizer, num_steps, hidden_size):
    while True:
        if player.done:
            player.hx = torch.zeros(1, hidden_size).cuda()
        else:
            player.hx = player.hx.detach()
        for step in range(num_steps):
            player.action_train()
            if player.done:
                break
        R = torch.zeros(1, 1).cuda()
        if not player.done:
            R = player.value().detach()
            bootstrap = torch.ones(1, 1).cuda()
        loss = player.loss(R)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_the_end_of_an_episode_gates_while_the_steps_that_continue_one_do_not() -> None:
    # dgriff777/rl_a3c_pytorch: `if player.done:` runs once per episode; `if not player.done:` on the other updates
    assert lines(A3C_WORKER, "TL406") == [15, 18]


EXITS = """
import torch


def train(model, loader, opt):
    for step, (x, y) in enumerate(loader):
        x, y = x.cuda(), y.cuda()
        if step % 100 == 0:
            print("at", step)
            continue
        loss = (model(x) - y).pow(2).mean()
        print(loss.item())
        loss.backward()
        opt.step()


def match(model, outputs, targets):
    for b in range(len(targets)):
        num_insts = len(targets[b])
        if num_insts == 0:
            continue
        cost = outputs[b].softmax(-1)
        print(cost.max().item())


def maybe_average(step, last, interval):
    if step - last < interval:
        return
    moved = torch.ones(8, device="cuda").sum()
    print(moved.item())
"""


def test_an_early_exit_on_a_gate_leaves_the_rest_to_every_other_step() -> None:
    # what an exit on one step in a hundred skips runs on the ninety-nine others; a count compared with
    # zero (DiffusionDet's matcher skipping an image without boxes) exits for some items, not most steps;
    # an exit until `interval` steps have passed leaves the rest to one step in `interval`
    called = "\n\ndef step(model, opt, outputs, targets, i):\n    match(model, outputs, targets)\n    maybe_average(i, 0, 100)\n    opt.step()\n"
    assert lines(EXITS + called, "TL401") == [12, 23]


def test_a_while_on_a_device_value_reads_it_and_its_body_runs_when_the_data_says_so() -> None:
    # DiffusionDet's dynamic-k matching: the test reads the device every time; what its body reads
    # runs only when the data leaves a box unmatched (one finding, the test's)
    code = """
    import torch

    def train(model, loader, opt):
        for x in loader:
            cost = model(x.cuda())
            matching = torch.zeros_like(cost)
            while (matching.sum(0) == 0).any():
                matching[:, cost.argmin(1)] = 1.0
                if (matching.sum(1) > 1).sum() > 0:
                    matching *= 0
            (cost * matching).sum().backward()
            opt.step()
    """
    assert lines(code, "TL401") == [8]
