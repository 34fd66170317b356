"""Presence tests that gate: `if storer is not None:` where `storer` is None on all steps but the ones
a periodic test picks. A loss hands its record on through a helper (`_pre_call`) only one step in
`record_loss_every`; each loss term appends `x.item()` to it under the presence test, in the loss's
method and in module functions it passes the record to (also after an unpacked argument,
`_kl(*latent, storer)`). A record that is given on every step keeps the findings, as does a plain
`if writer is not None:` of a value set once."""

from __future__ import annotations

from tests.helpers import lines

LOSSES = """
import torch
import torch.nn.functional as F


class BaseLoss:
    def __init__(self, record_loss_every=50):
        self.n_train_steps = 0
        self.record_loss_every = record_loss_every

    def _pre_call(self, is_train, storer):
        if is_train:
            self.n_train_steps += 1
        if not is_train or self.n_train_steps % self.record_loss_every == 1:
            storer = storer
        else:
            storer = None
        return storer


def _reconstruction_loss(data, recon, storer=None):
    loss = F.binary_cross_entropy(recon, data, reduction="sum")
    if storer is not None:
        storer["recon_loss"].append(loss.item())
    return loss


def _kl_loss(mean, logvar, storer=None):
    kl = (-0.5 * (1 + logvar - mean.pow(2) - logvar.exp())).mean(dim=0).sum()
    if storer is not None:
        storer["kl_loss"].append(kl.item())
    return kl


class BetaLoss(BaseLoss):
    def __call__(self, data, recon, latent, is_train, storer):
        storer = self._pre_call(is_train, storer)
        rec = _reconstruction_loss(data, recon, storer=storer)
        kl = _kl_loss(*latent, storer)
        loss = rec + 4 * kl
        if storer is not None:
            storer["loss"].append(loss.item())
        return loss


def train(model, loader, optimizer, loss_f, storer):
    model.cuda()
    for data in loader:
        data = data.cuda()
        recon, latent = model(data)
        loss = loss_f(data, recon, latent, model.training, storer)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


train(Net(), loader, torch.optim.Adam(params), BetaLoss(), storer)
"""


def _line(text: str, code: str) -> int:
    return code.splitlines().index(text) + 1


def test_a_record_given_only_on_logging_steps_gates_its_reads() -> None:
    assert lines(LOSSES, "TL401") == []


def test_a_record_given_every_step_keeps_each_read() -> None:
    every = LOSSES.replace("        storer = self._pre_call(is_train, storer)\n", "")
    expected = [_line(t, every) for t in (
        '        storer["recon_loss"].append(loss.item())',
        '        storer["kl_loss"].append(kl.item())',
        '            storer["loss"].append(loss.item())',
    )]
    assert lines(every, "TL401") == expected


def test_a_helper_that_hands_the_record_on_always_gates_nothing() -> None:
    # the else branch gives the record too: it is never None
    always = LOSSES.replace("            storer = None\n", "            storer = dict(storer)\n")
    assert len(lines(always, "TL401")) == 3


def test_a_value_given_under_a_periodic_conditional_expression_gates() -> None:
    code = """
    import torch

    def train(model, loader, optimizer, writer):
        model.cuda()
        for step, x in enumerate(loader):
            loss = model(x.cuda()).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            logged = writer if step % 100 == 0 else None
            if logged is not None:
                logged.add_scalar("loss", loss.item(), step)
            if writer is not None:
                writer.add_scalar("every", loss.item(), step)
    """
    # the second test is of a writer set once: true on every step, so its read stays a finding
    assert lines(code, "TL401") == [15]


# a flag set at an epoch's start holds on that epoch's later steps: `if struc_flag:` tests no presence
STAGE_FLAG = """
import torch


def train(model, loader, optimizer, opt):
    epoch_done = True
    epoch = 0
    while True:
        if epoch_done:
            if epoch >= opt.structure_after:
                struc_flag = True
            else:
                struc_flag = False
            epoch_done = False
        for x, y in loader:
            out = model(x.cuda(), y.cuda())
            loss = out["loss"].mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if struc_flag:
                print(out["struc_loss"].mean().item())
        epoch_done = True
        epoch += 1
"""


def test_a_flag_set_at_an_epoch_s_start_is_tested_on_every_step_of_the_stage() -> None:
    # ruotianluo/self-critical.pytorch: the structure stage's loss is read on every step once it starts
    assert lines(STAGE_FLAG, "TL401") == [22]
