"""One finding per defect (DESIGN.md, "What per step means"): a sync in a project helper is reported
once, in the helper or at its call sites but not both; the syncs of one statement are one finding;
and a rank test (`if rank == 0:`) is no gate, since that rank pays the sync on every step."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.helpers import lint
from trainlint.config import Settings
from trainlint.fixes import fix_source
from tests.test_per_step_analysis import sync_lines
from tests.test_whole_program import findings, write

STEP = """
    import torch
    from {module} import {names}
    model = torch.nn.Linear(2, 2).cuda()
    opt = torch.optim.SGD(model.parameters())
    for batch in loader:
        batch = batch.cuda()
{body}
        loss.backward()
        opt.step()
"""


def _train(module: str, names: str, body: str) -> str:
    return STEP.format(module=module, names=names, body="\n".join("        " + line for line in textwrap.dedent(body).strip().splitlines()))


def test_a_helper_reading_a_value_it_computes_is_reported_in_the_helper_only(tmp_path: Path) -> None:
    # `compute_loss` reads its own loss: the sync is the helper's, fixed there; the call is the
    # chain, not a finding of its own
    write(tmp_path, {
        "helpers.py": """
            import torch


            def compute_loss(model, batch):
                loss = (model(batch) - batch).abs().mean()
                print(loss.item())
                return loss
        """,
        "train.py": _train("helpers", "compute_loss", """
            loss = compute_loss(model, batch)
        """),
    })
    found = findings(tmp_path, ["train.py", "helpers.py"], "TL401")
    assert found == {"helpers.py:7:TL401": [[("train.py", 8)]]}


def test_a_helper_reading_only_what_it_is_passed_is_reported_at_the_call_site_only(tmp_path: Path) -> None:
    # the convention of the real-code labels: `metric_logger.update(loss=loss)` is the defect, where
    # the caller's tensor is known; `v.item()` inside `update` is not reported a second time
    write(tmp_path, {
        "utils.py": """
            import torch


            class MetricLogger:
                def update(self, **kwargs):
                    for k, v in kwargs.items():
                        if isinstance(v, torch.Tensor):
                            v = v.item()
                        self.meters[k] = v


            def log_value(t):
                print(t.detach().item())
        """,
        "train.py": _train("utils", "MetricLogger, log_value", """
            loss = model(batch).mean()
            MetricLogger().update(loss=loss)
            log_value(loss)
        """),
    })
    found = findings(tmp_path, ["train.py", "utils.py"], "TL401")
    assert set(found) == {"train.py:9:TL401", "train.py:10:TL401"}


LOSS_CLASS = """
    import numpy as np
    import torch


    class ComputeLoss:
        def __call__(self, preds, targets):
            targets = self.preprocess(targets, preds.shape[0])
            return (preds - targets).pow(2).mean()

        def preprocess(self, targets, batch_size):
            rows = np.zeros((batch_size, 1, 5)).tolist()
            for item in targets.cpu().numpy().tolist():
                rows[int(item[0])].append(item[1:])
            return torch.tensor(rows, device=targets.device)
"""


def test_a_host_copy_of_a_passed_tensor_handed_on_by_a_loss_class_is_reported_at_the_training_call(tmp_path: Path) -> None:
    # YOLOv6's shape: `self.compute_loss(preds, targets)` hands the device labels to `__call__`, which
    # hands them on as they came to `preprocess`, whose `targets.cpu().numpy().tolist()` copies them:
    # the defect is the call in the step, where the labels are known to be on the device; neither the
    # copy in `preprocess` nor the call in `__call__` is reported again
    write(tmp_path, {
        "losses/__init__.py": "",
        "losses/loss.py": LOSS_CLASS,
        "train.py": _train("losses.loss", "ComputeLoss", """
            compute_loss = ComputeLoss()
            loss = compute_loss(model(batch), batch)
        """),
    })
    found = findings(tmp_path, ["train.py", "losses/loss.py"], "TL401")
    assert set(found) == {"train.py:9:TL401"}


def test_a_host_copy_of_what_the_loss_class_computes_stays_in_the_class(tmp_path: Path) -> None:
    # near miss: `preprocess` copies a tensor `__call__` computes (`targets * 2`), not what the step
    # passed: the defect stays in the class, at the call that hands `preprocess` a tensor known to be
    # on the device (as `metric_logger.update(loss=loss)` is reported where it is called), whichever
    # file the analysis reads first
    write(tmp_path, {
        "losses/__init__.py": "",
        "losses/loss.py": LOSS_CLASS.replace("self.preprocess(targets, preds.shape[0])", "self.preprocess(targets * 2, preds.shape[0])"),
        "train.py": _train("losses.loss", "ComputeLoss", """
            compute_loss = ComputeLoss()
            loss = compute_loss(model(batch), batch)
        """),
    })
    assert set(findings(tmp_path, ["train.py", "losses/loss.py"], "TL401")) == {"losses/loss.py:8:TL401"}
    assert set(findings(tmp_path, ["losses/loss.py", "train.py"], "TL401")) == {"losses/loss.py:8:TL401"}


def test_a_host_copy_of_a_host_tensor_passed_to_the_loss_class_is_no_finding(tmp_path: Path) -> None:
    # near miss: the labels stay on the host (`labels = batch.cpu()` is reported once, in the step)
    write(tmp_path, {
        "losses/__init__.py": "",
        "losses/loss.py": LOSS_CLASS,
        "train.py": _train("losses.loss", "ComputeLoss", """
            compute_loss = ComputeLoss()
            labels = batch.cpu()
            loss = compute_loss(model(batch), labels)
        """),
    })
    found = findings(tmp_path, ["train.py", "losses/loss.py"], "TL401")
    assert set(found) == {"train.py:9:TL401"}


def test_a_reading_helper_given_host_values_is_silent(tmp_path: Path) -> None:
    # near miss: the same helpers given numbers read nothing on the device, at the call or inside
    write(tmp_path, {
        "utils.py": """
            def log_value(t):
                print(t.item())
        """,
        "train.py": _train("utils", "log_value", """
            loss = model(batch).mean()
            log_value(torch.tensor(1.0))
        """),
    })
    assert findings(tmp_path, ["train.py", "utils.py"], "TL401") == {}


def test_a_step_hook_reading_its_batch_is_reported_in_the_hook() -> None:
    # a framework hook's parameters come from the framework: no call site in the project reports them
    code = """
    import torch
    from lightning import LightningModule


    class Model(LightningModule):
        def training_step(self, batch, batch_idx):
            loss = self.net(batch).mean()
            print(batch.sum().item(), loss.detach().item())
            return loss
    """
    assert [d.line for d in lint(code, "TL401")] == [9]


def test_the_syncs_of_one_statement_are_one_finding_naming_each() -> None:
    code = """
    import torch
    for x, y in loader:
        loss_a, loss_b, loss_c = model(x.cuda(), y.cuda())
        (loss_a + loss_b + loss_c).backward()
        optimizer.step()
        print(f"{loss_a.item():.3f} {loss_b.item():.3f} {loss_c.item():.3f}")
    """
    found = [d for d in lint(code, "TL401")]
    assert [d.line for d in found] == [7]
    assert "`loss_b.item()` and `loss_c.item()`" in found[0].message
    assert found[0].facts.get("syncs") == 3


def test_three_statements_in_a_row_stay_three_findings() -> None:
    code = """
    import torch
    for x, y in loader:
        loss_a, loss_b, loss_c = model(x.cuda(), y.cuda())
        (loss_a + loss_b + loss_c).backward()
        optimizer.step()
        a = loss_a.item()
        b = loss_b.item()
        c = loss_c.item()
    """
    found = lint(code, "TL401")
    assert [d.line for d in found] == [7, 8, 9]
    assert not any("same statement" in d.message for d in found)


def test_rank_tests_are_no_gates() -> None:
    # each holds on every step of one rank: that rank pays the sync, the others wait at the next collective
    code = """
    import torch
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        if rank == 0:
            a = loss.item()
        if torch.distributed.get_rank() == 0:
            b = loss.item()
        if is_main_process():
            c = loss.item()
        if pgm.pp_is_last_stage:
            d = loss.item()
        if accelerator.is_main_process:
            e = loss.item()
        if self.is_last_rank:
            f = loss.item()
    """
    assert sync_lines(code) == [8, 10, 12, 14, 16, 18]


def test_a_rank_test_joined_to_a_gate_still_gates() -> None:
    # near miss: the periodic test, the logging flag, the first step and the early exit still gate
    code = """
    import torch
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 100 == 0:
            a = loss.item()
        if is_main_process() and args.do_log:
            b = loss.item()
        if pgm.pp_is_last_stage and step == 0:
            c = loss.item()
        if first_step:
            d = loss.item()
        if not should_log:
            continue
        e = loss.item()
    """
    assert sync_lines(code) == []


def test_the_syncs_of_one_header_are_one_finding() -> None:
    # an `if` testing two values and a `for` over two host copies: each header is one statement
    code = """
    import torch
    for x, ts in loader:
        losses = model(x.cuda(), ts.cuda())
        losses.mean().backward()
        optimizer.step()
        if losses.max().item() > 10 or losses.min().item() < 0:
            print("odd")
        for t, l in zip(ts.cuda().cpu().numpy(), losses.detach().cpu().numpy()):
            pass
    """
    found = lint(code, "TL401")
    assert [d.line for d in found] == [7, 9]
    assert all("same statement" in d.message for d in found)


def test_a_helper_reducing_what_it_is_passed_is_reported_in_the_helper(tmp_path: Path) -> None:
    # coqui's `get_mask_from_lengths`: `torch.max(lengths).item()` reads a value the helper computes,
    # fixed there once; its four call sites are chains, not findings of their own
    write(tmp_path, {
        "masks.py": """
            import torch


            def get_mask_from_lengths(lengths):
                max_len = torch.max(lengths).item()
                return torch.arange(0, max_len, device=lengths.device)[None, :] < lengths[:, None]
        """,
        "train.py": _train("masks", "get_mask_from_lengths", """
            loss = model(batch).mean()
            mask = get_mask_from_lengths(loss.detach())
            other = get_mask_from_lengths(loss.detach() + 1)
        """),
    })
    found = findings(tmp_path, ["train.py", "masks.py"], "TL401")
    assert set(found) == {"masks.py:6:TL401"}
    assert sorted(found["masks.py:6:TL401"]) == [[("train.py", 9)], [("train.py", 10)]]


def test_a_host_copy_of_what_no_caller_can_see_stays_in_the_helper(tmp_path: Path) -> None:
    # near miss: StyleTTS2's `maximum_path(neg_cent, mask)` copies `neg_cent.data.cpu()`, a tensor the
    # step passes as it came, but every caller passes what the analysis cannot see (an aligner of a
    # library): no call would report it, so the copy is reported in the helper, with its chain
    write(tmp_path, {
        "utils.py": """
            import numpy as np


            def maximum_path(neg_cent):
                return np.ascontiguousarray(neg_cent.data.cpu().numpy())
        """,
        "train.py": _train("utils", "maximum_path", """
            import aligners
            attn = aligners.align(batch)
            path = maximum_path(attn)
            loss = model(batch).mean()
        """),
    })
    found = findings(tmp_path, ["train.py", "utils.py"], "TL401")
    assert set(found) == {"utils.py:6:TL401"}


def test_a_loss_object_held_by_the_trainer_is_called_through_its_attribute(tmp_path: Path) -> None:
    # YOLOv6's Trainer: `self.compute_loss = ComputeLoss()` in its set-up, `self.compute_loss(preds,
    # targets)` in its step: the held object's `__call__` runs, and its read is reported at that call
    write(tmp_path, {
        "losses/__init__.py": "",
        "losses/loss.py": LOSS_CLASS,
        "engine.py": """
            import torch
            from losses.loss import ComputeLoss


            class Trainer:
                def __init__(self, model, loader):
                    self.model, self.loader = model.cuda(), loader
                    self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
                    self.compute_loss = ComputeLoss()

                def train(self):
                    for images, targets in self.loader:
                        images, targets = images.cuda(), targets.cuda()
                        loss = self.compute_loss(self.model(images), targets)
                        self.opt.zero_grad()
                        loss.backward()
                        self.opt.step()
        """,
    })
    found = findings(tmp_path, ["engine.py", "losses/loss.py"], "TL401")
    assert set(found) == {"engine.py:15:TL401"}


def test_a_host_copy_under_a_mode_the_caller_chooses_is_no_read_of_the_call(tmp_path: Path) -> None:
    # near miss: YOLOX's label assignment copies its inputs to the host only `if mode == "cpu":`, the
    # fallback its caller asks for after running out of device memory; the step's call passes none
    write(tmp_path, {
        "assign.py": """
            import torch


            def get_assignments(boxes, preds, mode="gpu"):
                if mode == "cpu":
                    boxes = boxes.cpu().float()
                return (boxes - preds).abs().argmin(dim=1)
        """,
        "train.py": _train("assign", "get_assignments", """
            preds = model(batch)
            matched = get_assignments(batch, preds)
            loss = preds.gather(1, matched[:, None]).mean()
        """),
    })
    assert findings(tmp_path, ["train.py", "assign.py"], "TL401") == {}


def test_a_forward_handing_a_passed_tensor_to_a_reading_helper_is_reported_in_the_forward(tmp_path: Path) -> None:
    # simple-faster-rcnn's trainer: its `forward`, called by `train_step` with the batch the script moved,
    # hands an element of it to `at.tonumpy`, which copies it to the host. A module's forward hands its
    # reads on to nobody, so the read is reported there (not at the script's call, nor nowhere)
    write(tmp_path, {
        "utils/__init__.py": "",
        "utils/array_tool.py": """
        import numpy as np
        import torch


        def tonumpy(data):
            if isinstance(data, np.ndarray):
                return data
            return data.detach().cpu().numpy()
    """,
        "trainer.py": """
        import torch
        from torch import nn
        from utils import array_tool as at


        class Trainer(nn.Module):
            def __init__(self, net):
                super().__init__()
                self.net = net
                self.optimizer = torch.optim.SGD(net.parameters(), lr=0.1)

            def forward(self, imgs, bboxes):
                bbox = bboxes[0]
                boxes = at.tonumpy(bbox)
                return self.net(imgs).sum()

            def train_step(self, imgs, bboxes):
                self.optimizer.zero_grad()
                loss = self.forward(imgs, bboxes)
                loss.backward()
                self.optimizer.step()
    """,
        "train.py": """
        from trainer import Trainer


        def train(model, loader):
            trainer = Trainer(model).cuda()
            for img, bbox in loader:
                trainer.train_step(img.cuda(), bbox.cuda())
    """,
    })
    assert list(findings(tmp_path, ["train.py", "trainer.py", "utils/array_tool.py"])) == ["trainer.py:15:TL401"]


def test_the_message_of_a_statement_of_reading_calls_names_the_others_inside_the_clause() -> None:
    found = lint("""
        import torch


        def to_np(t):
            return t.detach().cpu().numpy()


        model = torch.nn.Linear(2, 2).cuda()
        opt = torch.optim.SGD(model.parameters())
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            loss = model(x).sum()
            a, b = to_np(x), to_np(y)
            loss.backward()
            opt.step()
    """, "TL401")
    assert [d.message for d in found] == [
        "`to_np(x)`, which reads its tensor arguments on the host (`to_np` in train.py) (and, in the same statement, "
        "`to_np(y)`), synchronises the host with the GPU on every training step"
    ]


VARIANCE_ADAPTOR = """
import torch
from torch import nn


class VarianceAdaptor(nn.Module):
    def pitch_per_phoneme(self, phone, src_len, pitch):
        return torch.tensor([p[:n].mean() for p, n in zip(pitch.cpu().numpy(), src_len.cpu().numpy())]).to(phone.device)

    def lengths_on_host(self, src_len, mel_len):
        return src_len.cpu().numpy(), mel_len.cpu().numpy()

    def forward(self, text, src_len, mel_len, pitch):
        pitch = self.pitch_per_phoneme(text, src_len, pitch.cuda())
        host = self.lengths_on_host(src_len, mel_len)
        return pitch


model = VarianceAdaptor()
net = nn.Linear(4, 4).cuda()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for text, src_len, mel_len, pitch in loader:
    out = model(text, src_len, mel_len, pitch)
    loss = net(out).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def test_a_helper_statement_reading_what_a_call_passes_is_reported_once_at_the_call() -> None:
    # Comprehensive-Transformer-TTS's variance adaptor: one statement copies every argument to the host;
    # the call passes the pitch on the device (where the read is known) and lengths of unknown place, so
    # the statement is one defect, reported at the call (14), not again in the helper (8). A helper
    # whose reads no caller can tell stays reported in the helper (11)
    assert [d.line for d in lint(VARIANCE_ADAPTOR, "TL401")] == [11, 14]


def test_the_moves_of_one_statement_are_one_finding_with_one_fix() -> None:
    # a dict of host tensors moved entry by entry is one statement: one finding, naming the others,
    # whose fix creates each on the device
    code = """
    import torch
    for x, y in loader:
        inputs = {
            "x": x.cuda(),
            "mask": torch.ones(x.shape[0]).to("cuda"),
            "pos": torch.arange(x.shape[1]).to("cuda"),
        }
        loss = model(**inputs)
        loss.backward()
        optimizer.step()
    """
    found = lint(code, "TL406")
    assert [d.line for d in found] == [6]
    assert "in the same statement, `torch.arange(x.shape[1]).to(\"cuda\")`" in found[0].message
    assert found[0].facts.get("moves") == 2
    fixed = fix_source(textwrap.dedent(code), "train.py", Settings(select=("TL406",)), unsafe=False)
    assert '"mask": torch.ones(x.shape[0], device="cuda"),' in fixed.source
    assert '"pos": torch.arange(x.shape[1], device="cuda"),' in fixed.source
    assert not lint(fixed.source, "TL406")


def test_moves_in_separate_statements_stay_separate_findings() -> None:
    code = """
    import torch
    for x, y in loader:
        mask = torch.ones(x.shape[0]).to("cuda")
        pos = torch.arange(x.shape[1]).to("cuda")
        loss = model(x.cuda(), mask, pos)
        loss.backward()
        optimizer.step()
    """
    found = lint(code, "TL406")
    assert [d.line for d in found] == [4, 5]
    assert not any("same statement" in d.message for d in found)
    assert all(d.fix is not None for d in found)


# 3DETR's box utilities: the matcher hands the targets' counts, of a place no caller knows (a
# library's `prepare`), to a function that hands them on as they came to the implementation that
# copies them to the host
BOX_UTIL = """
    import torch


    def _iou_cython(corners1, corners2, nums_k2):
        nums = nums_k2.cpu().numpy()
        return (corners1 - corners2).abs().sum(-1) * float(nums[0])


    def generalized_iou(corners1, corners2, nums_k2: torch.Tensor):
        with torch.no_grad():
            return _iou_cython(corners1, corners2, nums_k2)
"""

BOX_CRITERION = """
    import torch

    from box_util import generalized_iou
    from data import prepare


    class SetCriterion(torch.nn.Module):
        def forward(self, outputs, targets):
            return generalized_iou(outputs["corners"], targets["corners"], targets["nactual_gt"]).mean()


    def train(model, optimizer, loader):
        criterion = SetCriterion()
        for batch in loader:
            targets = prepare(batch)
            loss = criterion(model(batch["x"].cuda()), targets)
            loss.backward()
            optimizer.step()
"""


def test_a_passed_value_of_unknown_place_handed_on_as_it_came_is_reported_once_where_it_is_read(tmp_path: Path) -> None:
    write(tmp_path, {"box_util.py": BOX_UTIL, "criterion.py": BOX_CRITERION})
    found = findings(tmp_path, ["box_util.py", "criterion.py"], "TL401")
    assert sorted(found) == ["box_util.py:6:TL401"]
