"""Probes of the second-wave rules: small experiments on a model shaped like the flagged code.

Where `verify run` checks an invariant on the user's run, the probe measures with the same function
(`trainlint.verify.invariants`): what trains (a misspelled freeze, layers in a plain list, a head
replaced after the optimizer) and whether evaluation is deterministic (functional dropout without
`training=`, a validation forward in training mode). The others measure the mechanism directly (TL510
with two gloo ranks on the CPU).
Imports torch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from trainlint.verify.invariants import NO_OPTIMIZER, TRAINS, eval_forward_determinism, trainable_parameters

Evidence = dict[str, Any]


def _verdict(confirmed: bool, evidence: Evidence, summary: str) -> Evidence:
    return {"status": "confirmed" if confirmed else "not reproduced", "evidence": evidence, "summary": summary}


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: str, inputs: int = 8) -> None:
    x = torch.randn(16, inputs, device=device)
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()


def probe_freeze_flag(facts: Evidence, device: str) -> Evidence:
    """TL504: `p.requires_grads = False` on a backbone; what trains after a step, and does the
    backbone move?"""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
    backbone = model[0]
    attribute = str(facts.get("attribute") or "requires_grads")
    for p in backbone.parameters():
        setattr(p, attribute, False)  # the misspelled flag, as the flagged line writes it
    before = backbone.weight.detach().clone()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    _step(model, optimizer, device)
    report = trainable_parameters(model, [optimizer])
    moved = not torch.equal(before, backbone.weight.detach())
    backbone_rows = [r for r in report["parameters"] if r["name"].startswith("0.")]
    evidence = {"attribute": attribute, "backbone_status": sorted({r["status"] for r in backbone_rows}), "backbone_moved": moved,
                "share_trained": report["share_trained"]}
    confirmed = moved and all(r["status"] == TRAINS for r in backbone_rows)
    summary = f"after `p.{attribute} = False` the backbone still trains: {report['share_trained']:.0%} of the parameters train and its weights moved in one step"
    return _verdict(confirmed, evidence, summary)


class _FunctionalDropout(torch.nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.fc, self.p = torch.nn.Linear(8, 8), p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.fc(x), self.p)  # no `training=`: the flagged call


def probe_functional_dropout(facts: Evidence, device: str) -> Evidence:
    """TL505: two eval-mode forwards of one batch through `F.dropout(x, p)`: do they differ?"""
    p = float(facts.get("p") or 0.5)
    torch.manual_seed(0)
    model = _FunctionalDropout(p).to(device)
    report = eval_forward_determinism(model, (torch.randn(32, 8, device=device),))
    summary = f"after `model.eval()`, two forwards of the same batch differ by up to {report['max_abs_diff']:.3g} (dropout p={p:g} still on)"
    return _verdict(not report["deterministic"], {"p": p, **report}, summary)


class _PlainListModel(torch.nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.blocks = [torch.nn.Linear(8, 8) for _ in range(depth)]  # the flagged attribute
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


def probe_plain_list(facts: Evidence, device: str) -> Evidence:
    """TL506: layers in a plain list: parameters the model reports vs those built, and what trains."""
    torch.manual_seed(0)
    model = _PlainListModel(3)
    model.to(device)  # moves the head only; the listed blocks stay where they were built
    model.blocks = [b.to(device) for b in model.blocks]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _step(model, optimizer, device)
    report = trainable_parameters([model, *model.blocks], [optimizer])
    registered = sum(p.numel() for p in model.parameters())
    built = registered + sum(p.numel() for b in model.blocks for p in b.parameters())
    evidence = {"parameters_reported": registered, "parameters_built": built, "state_dict_keys": len(model.state_dict()),
                "not_in_optimizer": report["by_status"].get(NO_OPTIMIZER, 0)}
    summary = (
        f"`model.parameters()` reports {registered} of {built} parameters built; {evidence['not_in_optimizer']} are in no optimizer "
        f"and never train, and `state_dict()` saves {evidence['state_dict_keys']} tensors"
    )
    return _verdict(registered < built and evidence["not_in_optimizer"] > 0, evidence, summary)


def probe_replaced_layer(facts: Evidence, device: str) -> Evidence:
    """TL507: a head replaced after the optimizer was built: does it train?"""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model[2] = torch.nn.Linear(16, 1).to(device)  # the flagged replacement
    before = model[2].weight.detach().clone()
    for _ in range(3):
        _step(model, optimizer, device)
    report = trainable_parameters(model, [optimizer])
    head = [r for r in report["parameters"] if r["name"].startswith("2.")]
    moved = not torch.equal(before, model[2].weight.detach())
    evidence = {"head_status": sorted({r["status"] for r in head}), "head_moved": moved, "optimizer_elements_outside": report["optimizer_elements_outside"]}
    summary = f"the new head is {', '.join(evidence['head_status'])}: its weights {'moved' if moved else 'did not move'} in 3 steps, while the optimizer still holds {report['optimizer_elements_outside']} parameters of the old head"
    return _verdict(not moved and all(r["status"] == NO_OPTIMIZER for r in head), evidence, summary)


def probe_clip_after_step(facts: Evidence, device: str) -> Evidence:
    """TL205: clipping after `optimizer.step()`: how large was the update the step applied?"""
    max_norm = float(facts.get("max_norm") or 1.0)
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.zeros(1000, device=device))
    optimizer = torch.optim.SGD([param], lr=1.0)
    param.grad = torch.full_like(param, 10.0)  # a gradient spike
    optimizer.step()
    torch.nn.utils.clip_grad_norm_([param], max_norm)  # the flagged order
    applied = float(param.detach().norm())
    evidence = {"max_norm": max_norm, "applied_update_norm": applied}
    summary = f"the step applied an update of norm {applied:.3g} (lr 1) although gradients are clipped to {max_norm:g}: the clip came after it"
    return _verdict(applied > max_norm * 1.01, evidence, summary)


def probe_sampler_epoch(facts: Evidence, device: str) -> Evidence:
    """TL508: a shuffling DistributedSampler iterated for three epochs without `set_epoch`."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(list(range(64)), num_replicas=2, rank=0, shuffle=True, seed=0)
    orders = [list(sampler) for _ in range(3)]
    sampler.set_epoch(1)
    reshuffled = list(sampler) != orders[0]
    evidence = {"epochs": 3, "same_order_every_epoch": orders[0] == orders[1] == orders[2], "set_epoch_reshuffles": reshuffled}
    summary = "without `set_epoch`, each epoch draws the same order (rank 0 of 2); `set_epoch(1)` changes it"
    return _verdict(evidence["same_order_every_epoch"] and reshuffled, evidence, summary)


def probe_double_softmax(facts: Evidence, device: str) -> Evidence:
    """TL509: cross-entropy of softmax outputs vs of logits: the gradient that reaches the logits."""
    torch.manual_seed(0)
    logits = (torch.randn(64, 10, device=device) * 3).requires_grad_()
    target = torch.randint(0, 10, (64,), device=device)
    F.cross_entropy(logits, target).backward()
    plain = float(logits.grad.norm())
    logits.grad = None
    doubled_loss = F.cross_entropy(torch.softmax(logits, dim=1), target)
    doubled_loss.backward()
    doubled = float(logits.grad.norm())
    evidence = {"grad_norm_logits": plain, "grad_norm_softmax_then_ce": doubled, "loss_floor": float(-torch.log_softmax(torch.tensor([1.0] + [0.0] * 9), 0)[0])}
    summary = (
        f"the gradient reaching the logits shrinks from {plain:.3g} to {doubled:.3g} ({doubled / plain:.0%}); even a perfect "
        f"prediction keeps the loss above {evidence['loss_floor']:.3g} with 10 classes"
    )
    return _verdict(doubled < plain * 0.8, evidence, summary)


def probe_validation_in_train_mode(facts: Evidence, device: str) -> Evidence:
    """TL511: validation forwards under `no_grad` with the model still in training mode."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 2)).to(device)
    model.train()
    report = eval_forward_determinism(model, (torch.randn(32, 8, device=device) + 3.0,), switch_to_eval=False)
    summary = (
        f"in training mode two validation forwards differ by up to {report['max_abs_diff']:.3g} and change "
        f"{', '.join(report.get('buffers_changed') or []) or 'no buffer'}"
    )
    return _verdict(not report["deterministic"], report, summary)


def _ddp_rank(rank: int, init: str, move: bool, out: Any) -> None:
    """One of two gloo ranks: wrap a model in DDP, (maybe) move it to float64 after wrapping, run a
    backward on rank-specific data and report whether the ranks' gradients agree."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        ddp = DistributedDataParallel(torch.nn.Linear(4, 2))
        dtype = torch.float32
        if move:
            ddp.module.double()  # the flagged move: a dtype change after wrapping
            dtype = torch.float64
        torch.manual_seed(1 + rank)  # each rank its own batch, as a sampler gives it
        ddp(torch.randn(8, 4, dtype=dtype)).sum().backward()
        grad = ddp.module.weight.grad.detach().to(torch.float64).flatten()
        gathered = [torch.empty_like(grad) for _ in range(2)]
        dist.all_gather(gathered, grad)
        if rank == 0:
            out.put(float((gathered[0] - gathered[1]).abs().max()))
    finally:
        dist.destroy_process_group()


def _ddp_gradient_gap(move: bool) -> float:
    import tempfile

    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    out = context.Queue()
    with tempfile.TemporaryDirectory() as folder:
        init = f"file://{folder}/rendezvous"
        ranks = [context.Process(target=_ddp_rank, args=(r, init, move, out)) for r in range(2)]
        for p in ranks:
            p.start()
        gap = out.get(timeout=90)
        for p in ranks:
            p.join(30)
    return float(gap)


def probe_ddp_moved(facts: Evidence, device: str) -> Evidence:
    """TL510: two gloo ranks, the DDP model moved to float64 after wrapping: are the gradients still
    averaged (equal on both ranks after backward)?"""
    moved, plain = _ddp_gradient_gap(move=True), _ddp_gradient_gap(move=False)
    evidence = {"ranks": 2, "backend": "gloo", "move": ".double() on .module after wrapping", "max_grad_gap_moved": moved, "max_grad_gap_without_move": plain}
    summary = (
        f"after `.module.double()` the 2 ranks' gradients differ by up to {moved:.3g} after backward (not averaged); "
        f"without the move they agree ({plain:.3g})"
    )
    return _verdict(moved > 1e-6 and plain < 1e-6, evidence, summary)


PROBES = {
    "TL205": probe_clip_after_step,
    "TL504": probe_freeze_flag,
    "TL505": probe_functional_dropout,
    "TL506": probe_plain_list,
    "TL507": probe_replaced_layer,
    "TL508": probe_sampler_epoch,
    "TL509": probe_double_softmax,
    "TL510": probe_ddp_moved,
    "TL511": probe_validation_in_train_mode,
}
