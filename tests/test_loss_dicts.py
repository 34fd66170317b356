"""A criterion that returns a dict of losses (the DETR family's `SetCriterion`): `losses = {}` filled by
`losses.update(self.get_loss(loss, ...))`, where `get_loss` calls one of a dict of bound methods by key
(`loss_map[loss](outputs, targets)`), each returning `{"loss_ce": ...}`; the loop reduces the dict with a
helper that gives back what it is given on one process (`if world_size < 2: return input_dict`) and a
dict it computes otherwise, then logs it with `metric_logger.update(**loss_dict_reduced_scaled)`, whose
`update` reads each tensor on the host (`v.item()`). The loop's call is where the read is reported."""

from __future__ import annotations

from pathlib import Path

from tests.test_library_hooks import lint_tree

CRITERION = """
    import torch
    from torch import nn


    class SetCriterion(nn.Module):
        def __init__(self, losses):
            super().__init__()
            self.losses = losses
            self.weight_dict = {"loss_ce": 1.0, "loss_bbox": 5.0}

        def loss_labels(self, outputs, targets, num_boxes):
            loss_ce = torch.nn.functional.cross_entropy(outputs["pred_logits"], targets) / num_boxes
            return {"loss_ce": loss_ce}

        def loss_boxes(self, outputs, targets, num_boxes):
            losses = {}
            losses["loss_bbox"] = (outputs["pred_boxes"] - targets).abs().sum() / num_boxes
            return losses

        def get_loss(self, loss, outputs, targets, num_boxes):
            loss_map = {"labels": self.loss_labels, "boxes": self.loss_boxes}
            return loss_map[loss](outputs, targets, num_boxes)

        def forward(self, outputs, targets):
            num_boxes = torch.as_tensor([len(targets)], dtype=torch.float, device=targets.device)
            num_boxes = torch.clamp(num_boxes, min=1).item()
            losses = {}
            for loss in self.losses:
                losses.update(self.get_loss(loss, outputs, targets, num_boxes))
            return losses
"""

MISC = """
    import torch
    import torch.distributed as dist


    def get_world_size():
        return dist.get_world_size() if dist.is_initialized() else 1


    def reduce_dict(input_dict):
        world_size = get_world_size()
        if world_size < 2:
            return input_dict
        with torch.no_grad():
            names = sorted(input_dict.keys())
            values = torch.stack([input_dict[k] for k in names], dim=0)
            dist.all_reduce(values)
            values /= world_size
            reduced_dict = {k: v for k, v in zip(names, values)}
        return reduced_dict


    class MetricLogger:
        def __init__(self):
            self.meters = {}

        def update(self, **kwargs):
            for k, v in kwargs.items():
                if isinstance(v, torch.Tensor):
                    v = v.item()
                self.meters[k] = v
"""

ENGINE = """
    import torch

    import misc
    from criterion import SetCriterion


    def train_one_epoch(model, loader, optimizer, step_log):
        criterion = SetCriterion(["labels", "boxes"])
        metric_logger = misc.MetricLogger()
        for step, (samples, targets) in enumerate(loader):
            samples, targets = samples.cuda(), targets.cuda()
            outputs = model(samples)
            loss_dict = criterion(outputs, targets)
            weight_dict = criterion.weight_dict
            losses = sum(loss_dict[k] * weight_dict[k] for k in loss_dict.keys() if k in weight_dict)
            loss_dict_reduced = misc.reduce_dict(loss_dict)
            {log}
            optimizer.zero_grad()
            losses.backward()
            optimizer.step()
"""

LOGGED = "metric_logger.update(**{k: v * weight_dict[k] for k, v in loss_dict_reduced.items()})"


def _project(log: str) -> dict[str, str]:
    return {"criterion.py": CRITERION, "misc.py": MISC, "engine.py": ENGINE.replace("{log}", log)}


def test_a_dict_of_losses_logged_every_step_is_read_where_the_loop_logs_it(tmp_path: Path) -> None:
    found = [f for f in lint_tree(tmp_path, _project(LOGGED)) if f.endswith("TL401") and f.startswith("engine")]
    assert found == ["engine.py:18:TL401"], found


def test_a_dict_filled_with_counts_logged_every_step_reads_nothing(tmp_path: Path) -> None:
    counts = "stats = {}; stats['boxes'] = len(targets); stats.update({'samples': len(samples)}); metric_logger.update(**stats)"
    assert [f for f in lint_tree(tmp_path, _project(counts)) if f.endswith("TL401") and f.startswith("engine")] == []


def test_a_dict_of_losses_logged_every_hundred_steps_is_gated(tmp_path: Path) -> None:
    gated = "if step % 100 == 0: " + LOGGED
    assert [f for f in lint_tree(tmp_path, _project(gated)) if f.endswith("TL401") and f.startswith("engine")] == []


def test_a_dict_of_losses_kept_and_never_logged_reads_nothing(tmp_path: Path) -> None:
    kept = "history = dict(loss_dict_reduced)"
    assert [f for f in lint_tree(tmp_path, _project(kept)) if f.endswith("TL401") and f.startswith("engine")] == []


def test_a_helper_giving_back_a_number_it_is_given_reads_the_tensors_it_is_not(tmp_path: Path) -> None:
    """`to_item(x)`: `if isinstance(x, (float, int)): return x`, else `return x.item()`: what a caller
    gets is a number either way (the read is the helper's)."""
    files = {
        "utils.py": """
            import torch


            def to_item(x):
                if isinstance(x, (float, int)):
                    return x
                return x.item()
        """,
        "train.py": """
            import torch

            import utils


            def train(model, loader, optimizer):
                best = 0.0
                for x, y in loader:
                    loss = model(x.cuda(), y.cuda())
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    norm = utils.to_item(loss.detach())
                    if norm > best:
                        best = norm
        """,
    }
    found = [f for f in lint_tree(tmp_path, files) if f.endswith("TL401")]
    assert found == ["train.py:14:TL401"], found  # (the call reads the loss; the `if` after it reads nothing)
