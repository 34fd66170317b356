"""The training step across objects, methods and modules (DESIGN.md, "The whole program"): a function
is per step when any call chain from a step loop reaches it, and a finding inside it is reported where
its code is, with the chain."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import lint
from trainlint.config import Settings
from trainlint.engine.lint import lint_paths

ROOT = Path(__file__).resolve().parent.parent


def write(folder: Path, files: dict[str, str]) -> None:
    (folder / "pyproject.toml").write_text("")  # the project's root
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def findings(folder: Path, paths: list[str], select: str | None = None) -> dict[str, list]:
    """{"path:line:code": [chain texts]} for the named files, linted together."""
    settings = Settings(select=(select,) if select else None, root=folder)
    out: dict[str, list] = {}
    for result in lint_paths([(folder / p, settings) for p in paths], jobs=1):
        for d in result.diagnostics:
            rel = Path(d.path).relative_to(folder).as_posix()
            out[f"{rel}:{d.line}:{d.code}"] = [[(Path(loc.path).name, loc.line) for loc in chain] for chain in d.chains]
    return out


# A DETR-style project: the loss module's `forward` reads a device value on the host, the model's
# `forward` builds labels on the host and moves them; the step loop lives in another module.
DETECTION = {
    "models/__init__.py": "",
    "models/criterion.py": """
        import torch
        import torch.nn as nn


        class SetCriterion(nn.Module):
            def forward(self, outputs, targets):
                loss = (outputs - targets).abs().mean()
                num_boxes = loss.detach().item()
                return loss / max(num_boxes, 1.0)
    """,
    "models/contrastive.py": """
        import torch
        import torch.nn as nn


        class Contrastive(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 8)

            def forward(self, x):
                labels = torch.arange(x.shape[0]).cuda()
                return self.proj(x), labels
    """,
    "engine.py": """
        import torch
        from models.criterion import SetCriterion
        from models.contrastive import Contrastive


        def train_one_epoch(loader, device):
            model = Contrastive().to(device)
            criterion = SetCriterion()
            optimizer = torch.optim.AdamW(model.parameters())
            for samples, targets in loader:
                samples, targets = samples.to(device), targets.to(device)
                outputs, labels = model(samples)
                loss = criterion(outputs, targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


        @torch.no_grad()
        def evaluate(loader, device):
            criterion = SetCriterion()
            for samples, targets in loader:
                criterion(samples.to(device), targets.to(device))
    """,
}


def test_a_loss_module_s_forward_called_every_step_from_another_module(tmp_path: Path) -> None:
    write(tmp_path, DETECTION)
    out = findings(tmp_path, list(DETECTION))
    assert out["models/criterion.py:9:TL401"] == [[("engine.py", 14)]]  # `criterion(outputs, targets)`
    assert out["models/contrastive.py:12:TL406"] == [[("engine.py", 13)]]  # `model(samples)`


def test_a_method_of_an_object_built_where_it_is_used_runs_in_its_module(tmp_path: Path) -> None:
    # LLaMA-Factory v1: `DistributedInterface().all_reduce(x)` (a singleton) every step, and the
    # interface hands the value to a helper module that `.item()`s it
    files = {
        "accel/__init__.py": "",
        "accel/helper.py": """
            import torch


            def operate(data):
                result = torch.as_tensor(data, device="cuda") * 2
                return result.item()
        """,
        "accel/interface.py": """
            from accel import helper


            class Interface:
                _instance = None

                def __new__(cls):
                    if cls._instance is None:
                        cls._instance = super().__new__(cls)
                    return cls._instance

                def all_reduce(self, data):
                    return helper.operate(data)
        """,
        "trainer.py": """
            import torch
            from accel.interface import Interface


            def fit(model, loader, optimizer):
                for batch in loader:
                    loss = model(batch.cuda())
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                    tokens = Interface().all_reduce(batch.numel())
        """,
    }
    write(tmp_path, files)
    out = findings(tmp_path, list(files))
    assert out == {"accel/helper.py:7:TL401": [[("trainer.py", 12), ("interface.py", 14)]]}
    assert findings(tmp_path, ["accel/helper.py"]) == out


def test_one_file_linted_alone_gets_the_findings_of_the_whole_project_run(tmp_path: Path) -> None:
    write(tmp_path, DETECTION)
    whole = findings(tmp_path, list(DETECTION))
    for name in DETECTION:
        alone = findings(tmp_path, [name])
        assert alone == {k: v for k, v in whole.items() if k.startswith(f"{name}:")}


def test_the_command_line_agrees_for_one_file_and_the_folder(tmp_path: Path) -> None:
    write(tmp_path, DETECTION)

    def run(*args: str) -> list[dict]:
        done = subprocess.run(
            [sys.executable, "-m", "trainlint", *args, "--output-format", "json", "--no-cache"],
            cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        return [d for d in json.loads(done.stdout) if d["path"].endswith("criterion.py")]

    alone, whole = run("models/criterion.py"), run(".")
    assert alone == whole and [d["line"] for d in alone] == [9]
    assert alone[0]["related"][0]["locations"][0]["line"] == 14


def test_show_steps_lists_each_per_step_function_with_a_chain_across_modules(tmp_path: Path) -> None:
    write(tmp_path, {**HANDED_IN, "pkg/eval.py": "import torch\n\n\ndef evaluate(model, x):\n    return model(x).item()\n"})
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "--show-steps", "."],
        cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # the loop, the model's `forward` (reached through `__call__` in another module) and the helper
    # it calls, each with how it is reached; evaluation code is not in the step
    assert "pkg/trainer.py:12:9: step loop in `Trainer.train`" in lines
    assert "pkg/model.py:12:5: `E2TTS.forward` runs every step via pkg/trainer.py:13" in lines
    assert "pkg/model.py:6:1: `lengths_mask` runs every step via pkg/trainer.py:13 → line 13" in lines
    assert not any("evaluate" in line for line in lines)
    assert lines[-1] == "2 per-step functions in 2 files"


def test_a_function_called_only_from_evaluation_is_not_per_step(tmp_path: Path) -> None:
    files = dict(DETECTION)
    files["engine.py"] = files["engine.py"].replace("loss = criterion(outputs, targets)", "loss = (outputs - targets).abs().mean()")
    write(tmp_path, files)
    out = findings(tmp_path, list(files))
    assert not [k for k in out if k.startswith("models/criterion.py")]


def test_forward_of_a_class_of_the_same_module_runs_every_step() -> None:
    found = lint(
        """
        import torch
        import torch.nn as nn

        class Decoder(nn.Module):
            def forward(self, x, lengths):
                max_len = lengths.max().item()
                mask = torch.zeros(x.shape[0], max_len).to(self.device)
                return x, mask

        class Seq2Seq(nn.Module):
            def __init__(self):
                super().__init__()
                self.decoder = Decoder()

            def forward(self, x, lengths):
                return self.decoder(x, lengths)

        model = Seq2Seq().cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for x, lengths in loader:
            out, mask = model(x.cuda(), lengths.cuda())
            out.sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        """,
    )
    by_code = {(d.code, d.line): [[loc.line for loc in c] for c in d.chains] for d in found}
    assert by_code[("TL401", 7)] == [[22, 17]]  # model(...) -> Seq2Seq.forward -> self.decoder(...)
    assert by_code[("TL406", 8)] == [[22, 17]]


def test_a_method_overridden_in_a_subclass_is_reached_from_the_inherited_loop() -> None:
    found = lint(
        """
        import torch

        class BasicTrainer:
            def clip_gradient(self):
                return torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 10.0)

            def train(self):
                self.policy.cuda()
                for batch in self.loader:
                    loss = self.policy(batch)
                    loss.backward()
                    grad_norm = self.clip_gradient()
                    self.optimizer.step()
                    self.optimizer.zero_grad()

        class FSDPTrainer(BasicTrainer):
            def clip_gradient(self):
                return self.policy.clip_grad_norm_(10.0).item()
        """,
        "TL401",
    )
    assert [(d.line, [[loc.line for loc in c] for c in d.chains]) for d in found] == [(19, [[13]])]


# d2l's framework: the trainer keeps the model it is given and calls the training step the model's
# base class defines, whose loss is abstract there and defined by each subclass
FRAMEWORK = """
import torch
from torch import nn
import torch.nn.functional as F


class Module(nn.Module):
    def loss(self, y_hat, y):
        raise NotImplementedError

    def training_step(self, batch):
        l = self.loss(self(*batch[:-1]), batch[-1])
        self.board.draw(self.trainer.step, l.item(), "loss")
        return l


class Classifier(Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 2)

    def forward(self, x):
        return self.net(x)

    def loss(self, y_hat, y):
        return F.cross_entropy(y_hat, y)


class Trainer:
    def fit(self, model, data):
        self.model = model.cuda()
        self.optim = torch.optim.SGD(model.parameters(), lr=0.1)
        for batch in data:
            loss = self.model.training_step([b.cuda() for b in batch])
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()


trainer = Trainer()
trainer.fit(Classifier(), loader)
"""


def test_a_trainer_runs_the_inherited_step_of_the_model_it_keeps() -> None:
    # the model's class is known only from the call of `fit`, asked for while the trainer's own class
    # was still being summarised; the abstract `loss` stands for the subclass's
    found = lint(FRAMEWORK, "TL401")
    assert [(d.line, [[loc.line for loc in c] for c in d.chains]) for d in found] == [(13, [[34]])]


def test_a_trainer_given_no_model_of_the_project_runs_no_step_of_it() -> None:
    # `fit` is called with a model from elsewhere: which `training_step` runs is not known here
    elsewhere = FRAMEWORK.replace("trainer.fit(Classifier(), loader)", "trainer.fit(load_model(), loader)")
    assert lint(elsewhere, "TL401") == []


def test_a_notebook_whose_model_forward_builds_a_host_tensor(tmp_path: Path) -> None:
    cells = [
        "import torch\nimport torch.nn as nn\n",
        "class Net(nn.Module):\n    def forward(self, x):\n        pos = torch.arange(x.shape[1]).to(x.device)\n        return x + pos\n",
        "model = Net().cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n"
        "    loss = model(x.cuda()).sum()\n    loss.backward()\n    opt.step()\n    opt.zero_grad()\n",
    ]
    notebook = {
        "cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in cells],
        "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5,
    }
    path = tmp_path / "train.ipynb"
    path.write_text(json.dumps(notebook))
    (result,) = lint_paths([(path, Settings(root=tmp_path))], jobs=1)
    assert [(d.code, d.cell, d.line) for d in result.diagnostics] == [("TL406", 2, 3)]


def test_a_noqa_on_the_calling_line_drops_that_chain() -> None:
    code = """
    import torch

    def log(loss):
        return loss.sum().item()  # (a value it computes: reported here, with its chains)

    model.cuda()
    for x in loader:
        loss = model(x.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        log(loss){noqa_a}
        log(loss * 2){noqa_b}
    """
    both = lint(code.format(noqa_a="", noqa_b=""), "TL401")
    assert [(d.line, len(d.chains)) for d in both] == [(5, 2)]
    one = lint(code.format(noqa_a="  # noqa: TL401", noqa_b=""), "TL401")
    assert [(d.line, [[loc.line for loc in c] for c in d.chains]) for d in one] == [(5, [[14]])]
    assert lint(code.format(noqa_a="  # noqa: TL401", noqa_b="  # noqa: TL401"), "TL401") == []
    # a bare `# noqa` (for a long line, say) speaks of its own line: the chains through it stay
    bare = lint(code.format(noqa_a="  # noqa", noqa_b="  # noqa: E501"), "TL401")
    assert [(d.line, len(d.chains)) for d in bare] == [(5, 2)]


def test_tl001_reports_a_call_site_noqa_that_drops_no_chain() -> None:
    code = """
    import torch

    def log(loss):
        return loss.item()

    def show(loss):
        return loss.shape

    model.cuda()
    for x in loader:
        loss = model(x.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        log(loss)  # noqa: TL401
        show(loss)  # noqa: TL401
    """
    found = [d for d in lint(code, "TL401", extend_select=("TL001",))]
    # the first noqa drops the only chain of the `.item()` in `log`; the second drops nothing
    assert [(d.code, d.line) for d in found] == [("TL001", 17)]


def test_the_chain_in_every_output_format(tmp_path: Path) -> None:
    write(tmp_path, DETECTION)

    def run(fmt: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "trainlint", "models/criterion.py", "--output-format", fmt, "--no-cache"],
            cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        return done.stdout

    assert "= note: runs every step: " in run("text") and "engine.py:14" in run("text")
    assert run("concise").splitlines()[0].endswith("(every step via engine.py:14)")
    assert "(every step via engine.py:14)" in run("github")
    sarif = json.loads(run("sarif"))["runs"][0]["results"][0]
    assert sarif["relatedLocations"][0]["physicalLocation"]["region"]["startLine"] == 14
    lsp = next(iter(json.loads(run("lsp")).values()))[0]
    assert lsp["relatedInformation"][0]["location"]["range"]["start"]["line"] == 13  # 0-based


def test_a_bare_modulo_test_is_true_on_most_steps_not_a_gate() -> None:
    code = """
    import torch
    model.cuda()
    for step, x in enumerate(loader):
        loss = model(x.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 100:
            print(loss.item())
        if step % 100 != 0:
            print(loss.item())
        if not step % 100:
            print(loss.item())
        if step % 100 == 0:
            print(loss.item())
    """
    assert [d.line for d in lint(code, "TL401")] == [10, 12]


def test_a_setting_ordered_against_a_number_is_no_gate_whatever_its_name() -> None:
    # d2l's Trainer: `gradient_clip_val` holds a value, not a validation flag; the test is true on
    # every step or on none, so the clipping it guards (and its `if norm > ...` read) is per step
    code = """
    import torch
    model.cuda()
    for x in loader:
        loss = model(x.cuda())
        loss.backward()
        if gradient_clip_val > 0:
            norm = torch.sqrt(sum(torch.sum(p.grad ** 2) for p in params))
            if norm > gradient_clip_val:
                scale_grads(params, gradient_clip_val / norm)
        if do_val:
            print(loss.item())
        if step % val_every == 0 and val_every > 0:
            print(loss.item())
        optimizer.step()
    """
    assert [d.line for d in lint(code, "TL401")] == [9]


def test_a_reduction_over_dim_is_a_tensor_whatever_its_receiver() -> None:
    # YOLOX's loss head: `labels` arrives from the caller; `.sum(dim=2)` is torch's spelling (numpy
    # says `axis`), so `nlabel` is a tensor and `int(nlabel[i])` reads it per image, every step
    code = """
    import torch
    model.cuda()

    def get_losses(labels, outputs):
        nlabel = (labels.sum(dim=2) > 0).sum(dim=1)
        counts = labels.sum(axis=2)
        total = 0
        for i in range(outputs.shape[0]):
            total += int(nlabel[i]) + int(counts[i])
        return outputs.sum() * total

    for images, labels in loader:
        loss = get_losses(labels, model(images.cuda()))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    """
    assert [(d.line, d.column) for d in lint(code, "TL401")] == [(10, 18)]


def test_python_s_max_over_tensors_reads_each_comparison_on_the_host() -> None:
    # LLaMA-Factory's sequence-parallel padding: the longest length of all ranks, gathered as
    # device tensors, is found with the builtin `max`, whose `>` answers are read one by one
    code = """
    import torch
    import torch.distributed as dist

    def pad(v):
        data_len = torch.tensor(v.shape[-1], device=v.device)
        lengths = [torch.empty_like(data_len) for _ in range(4)]
        dist.all_gather(lengths, data_len)
        longest = max(lengths)
        widths = max([v.shape[-1], 8])
        return torch.nn.functional.pad(v, (0, int(longest) - v.shape[-1] + widths))

    for x in loader:
        loss = model(pad(x.cuda()))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    """
    # `max([v.shape[-1], 8])` orders numbers; `int(longest)` reads the tensor `max` returned, again
    assert [d.line for d in lint(code, "TL401")] == [9, 11]


def test_a_module_of_another_framework_is_not_pytorch_code() -> None:
    code = """
    import mxnet as mx
    from mxnet import autograd
    for x, y in loader:
        with autograd.record():
            loss = net(x)
        loss.backward()
        trainer.step(1)
        total += float(loss.sum())
        print(loss.mean().asscalar())
    """
    assert lint(code, "ALL") == []


def test_an_empty_notebook_file_is_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.ipynb"
    path.write_text("")
    (result,) = lint_paths([(path, Settings(root=tmp_path))], jobs=1)
    assert result.diagnostics == []


# An Accelerate-style trainer class in its own module: the model it trains is constructed in the
# launch script and handed to it, so only the project's call sites tell its class.
HANDED_IN = {
    "pkg/__init__.py": "",
    "pkg/model.py": """
        import torch
        import torch.nn as nn


        def lengths_mask(lengths):
            max_len = lengths.max().item()
            return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


        class E2TTS(nn.Module):
            def forward(self, x, lengths):
                mask = lengths_mask(lengths)
                return (x * mask).sum()
    """,
    "pkg/trainer.py": """
        import torch


        class Trainer:
            def __init__(self, model, optimizer):
                self.model = model
                self.optimizer = optimizer

            def train(self, loader):
                self.model.cuda()
                for x, lengths in loader:
                    loss = self.model(x.cuda(), lengths.cuda())
                    loss.backward()
                    self.optimizer.step()
                    self.optimizer.zero_grad()
    """,
    "train.py": """
        import torch
        from pkg.model import E2TTS
        from pkg.trainer import Trainer

        model = E2TTS()
        trainer = Trainer(model, torch.optim.Adam(model.parameters()))
        trainer.train(loader)
    """,
}


def test_a_model_handed_to_a_trainer_in_another_module_runs_its_forward_every_step(tmp_path: Path) -> None:
    write(tmp_path, HANDED_IN)
    out = findings(tmp_path, list(HANDED_IN))
    assert out == {"pkg/model.py:7:TL401": [[("trainer.py", 13), ("model.py", 13)]]}
    assert findings(tmp_path, ["pkg/model.py"]) == out  # and alone


def test_a_trainer_constructed_in_its_own_module_knows_its_model_s_class() -> None:
    found = lint(
        """
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def forward(self, x):
                return x.sum()

            def stats(self, x):
                return x.mean().item()

        class Trainer:
            def __init__(self, net):
                self.net = net.cuda()

            def fit(self, loader, opt):
                for x in loader:
                    loss = self.net(x.cuda())
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                    self.net.stats(x.cuda())

        Trainer(Net()).fit(loader, opt)
        """,
        "TL401",
    )
    assert [(d.line, [[loc.line for loc in c] for c in d.chains]) for d in found] == [(10, [[22]])]


def test_a_method_fed_a_float_already_read_does_not_sync_again() -> None:
    """`callback.check_early_stopping(loss.item())`: the method's parameter holds a Python float."""
    found = lint(
        """
        import torch

        class EarlyStopping:
            def __init__(self):
                self.lowest_loss = float("inf")

            def check(self, eval_loss):
                delta = self.lowest_loss - eval_loss
                if delta >= 0.01:
                    self.lowest_loss = eval_loss
                return False

        callback = EarlyStopping()
        model.cuda()
        for x in loader:
            loss = model(x.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if callback.check(loss.item()):
                break
        """,
        "TL401",
    )
    assert [d.line for d in found] == [21]  # the `.item()` itself, not the comparison in `check`


def test_accelerate_s_prepare_returns_the_model_it_is_given(tmp_path: Path) -> None:
    """`self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)` keeps the
    model's class (known here from the parameter's annotation), so its forward runs every step."""
    files = dict(HANDED_IN)
    files["pkg/trainer.py"] = """
        import torch
        from accelerate import Accelerator
        from pkg.model import E2TTS


        class Trainer:
            def __init__(self, model: E2TTS, optimizer):
                self.accelerator = Accelerator()
                self.model = model
                self.optimizer = optimizer
                self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)

            def train(self, loader):
                for x, lengths in loader:
                    loss = self.model(x, lengths)
                    self.accelerator.backward(loss)
                    self.optimizer.step()
                    self.optimizer.zero_grad()
    """
    files["train.py"] = "import torch\n"  # nobody passes the model in: the annotation says what it is
    write(tmp_path, files)
    assert findings(tmp_path, ["pkg/model.py"]) == {"pkg/model.py:7:TL401": [[("trainer.py", 16), ("model.py", 13)]]}


PREFERENCE_TRAINER = """
    import torch
    from trl import {base}


    class PairwiseTrainer({base}):
        def get_batch_loss_metrics(self, model, batch, train_eval="train"):
            chosen = model(batch["chosen"].cuda()).logits.mean(-1)
            rejected = model(batch["rejected"].cuda()).logits.mean(-1)
            losses = -torch.nn.functional.logsigmoid(chosen - rejected)
            metrics = {{"rewards/margins": (chosen - rejected).mean().item()}}
            return losses.mean(), metrics
"""


def test_a_library_trainer_s_per_step_method_is_known_through_the_class_s_bases() -> None:
    """trl's preference trainers call `get_batch_loss_metrics` from `compute_loss` every step: an
    override is per step because of what its base class is, not because of its name."""
    found = lint(PREFERENCE_TRAINER.format(base="DPOTrainer"), "TL401")
    assert [d.line for d in found] == [11]
    assert lint(PREFERENCE_TRAINER.format(base="KTOTrainer"), "TL401") != []
    # the same method in a class that no library calls every step is not per step
    plain = PREFERENCE_TRAINER.format(base="DPOTrainer").replace("from trl import DPOTrainer", "from mylib import DPOTrainer")
    assert lint(plain, "TL401") == []


def test_a_symlink_loop_in_the_project_does_not_stop_the_import_index(tmp_path: Path) -> None:
    """Finding a module's callers reads the project's modules: a `loop.py -> loop.py` among them is
    no module, and the helper's findings are still reported."""
    write(tmp_path, DETECTION)
    (tmp_path / "loop.py").symlink_to(tmp_path / "loop.py")
    out = findings(tmp_path, ["models/criterion.py"])
    assert list(out) == ["models/criterion.py:9:TL401"]


LOGGER_PASSED_IN = {
    "utils.py": """
        import torch


        class ScalarLogger:
            def __init__(self, writer):
                self.writer = writer

            def update(self, head="scalar", **kwargs):
                for k, v in kwargs.items():
                    if v is None:
                        continue
                    if isinstance(v, torch.Tensor):
                        v = v.item()
                    self.writer.add_scalar(head + "/" + k, v)


        class Net(torch.nn.Module):
            def forward(self, x):
                return x
    """,
    "engine.py": """
        import torch


        def train_one_epoch(model, criterion, loader, optimizer, device, log_writer=None):
            for samples, targets in loader:
                output = model(samples.to(device))
                loss = criterion(output, targets.to(device))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                acc = (output.argmax(-1) == targets.to(device)).float().mean()
                if log_writer is not None:
                    log_writer.update(acc=acc, head="train")
    """,
    "main.py": """
        import torch
        import utils
        from engine import train_one_epoch


        def main(args):
            model = utils.Net().cuda()
            if args.rank == 0 and args.log_dir is not None:
                log_writer = utils.ScalarLogger(make_writer(args.log_dir))
            else:
                log_writer = None
            for epoch in range(args.epochs):
                train_one_epoch(model, criterion, loader, optimizer, torch.device("cuda"), log_writer=log_writer)
    """,
}


def test_a_metric_logger_built_in_main_and_passed_to_the_epoch_function_reads_its_tensors(tmp_path: Path) -> None:
    """ConvNeXt/BEiT style: the logger is built in one branch (None in the other) and handed to the
    epoch function in another module; its `update` calls `.item()` on each tensor it is given."""
    write(tmp_path, LOGGER_PASSED_IN)
    assert list(findings(tmp_path, ["engine.py"], select="TL401")) == ["engine.py:14:TL401"]
    # the branch that builds the logger is not hidden by the `else:` that sets None
    plain = {**LOGGER_PASSED_IN, "main.py": LOGGER_PASSED_IN["main.py"].replace("utils.ScalarLogger(make_writer(args.log_dir))", "None")}
    write(tmp_path, plain)
    assert findings(tmp_path, ["engine.py"], select="TL401") == {}


def test_importers_of_a_package_module_are_the_files_that_name_what_it_defines(tmp_path: Path) -> None:
    """`from models import ...` names the package of `models/criterion.py`: a file importing the package
    for another module's names cannot call the criterion, and its summary is not asked for (a package
    called `utils` is imported by most of a project); a file that imports the module itself is kept."""
    from trainlint.project.index import Project

    write(tmp_path, {
        **DETECTION,
        "viz.py": "from models import contrastive\nprint(contrastive.Contrastive)\n",
        "loss_user.py": "from models import SetCriterion\n",
        "direct.py": "import models.criterion\n",
    })
    importers = {p.name for p in Project(tmp_path).importers((tmp_path / "models/criterion.py").resolve())}
    assert importers == {"engine.py", "loss_user.py", "direct.py"}


def test_one_line_formats_name_each_first_call_once() -> None:
    """Two chains through the same first call (`criterion(...)` reaching a helper twice) read as one."""
    from trainlint.diagnostics import Diagnostic, Location, Severity

    first = Location("train.py", 12, 5)
    d = Diagnostic(
        "TL401", "host-sync-in-step", "m", Severity.WARNING, "losses.py", 3, 1, 3, 9,
        chains=((first, Location("losses.py", 20, 9)), (first, Location("losses.py", 30, 9)), (Location("eval.py", 4, 1),)),
    )
    assert d.every_step_via() == " (every step via train.py:12, eval.py:4)"


# Tacotron-style attention: a factory in one module returns one of several classes by a setting; the
# decoder in another module calls the object's `init_states` every step.
ATTENTION = {
    "pkg/__init__.py": "",
    "pkg/attentions.py": """
        import torch
        from torch import nn


        class OriginalAttention(nn.Module):
            def init_states(self, inputs):
                self.alpha = torch.zeros(inputs.shape[0]).to(inputs.device)
                if self.windows is None or inputs.shape[1] > self.windows.shape[-1]:
                    self.windows = torch.arange(inputs.shape[1]).to(inputs.device)

            def forward(self, query, inputs):
                attention = query @ inputs
                if not self.training and self.windowing:
                    self.win_idx = torch.argmax(attention, 1)[0].item()
                return attention


        class GravesAttention(nn.Module):
            def init_states(self, inputs):
                self.mu_prev = torch.zeros(inputs.shape[0], 4).to(inputs.device)


        def init_attn(attn_type):
            if attn_type == "original":
                return OriginalAttention()
            if attn_type == "graves":
                return GravesAttention()
            raise RuntimeError(f"unknown attention {attn_type}")
    """,
    "train.py": """
        import torch
        from torch import nn
        from pkg.attentions import init_attn


        class Decoder(nn.Module):
            def __init__(self, attn_type):
                super().__init__()
                self.attention = init_attn(attn_type)

            def forward(self, query, inputs):
                self.attention.init_states(inputs)
                return self.attention(query, inputs)


        def train(loader, optimizer, attn_type):
            model = Decoder(attn_type).cuda()
            for query, inputs in loader:
                optimizer.zero_grad()
                model(query.cuda(), inputs.cuda()).sum().backward()
                optimizer.step()
    """,
}


def test_an_object_one_of_several_classes_runs_each_class_s_methods(tmp_path: Path) -> None:
    """`init_attn(kind)` returns one of two classes: both `init_states` run every step. Not per step: the
    buffer rebuilt only when outgrown, and the inference-only branch (`if not self.training and ...`)."""
    write(tmp_path, ATTENTION)
    found = findings(tmp_path, list(ATTENTION))
    assert sorted(found) == ["pkg/attentions.py:21:TL406", "pkg/attentions.py:8:TL406"]
    # the same findings when the module is linted alone
    assert set(findings(tmp_path, ["pkg/attentions.py"])) == {k for k in found if k.startswith("pkg/")}


# A Tacotron-style decoder: `forward` rebuilds its RNN state from zeros, then steps it per frame on
# `self`; the graph lives for one forward pass. A trainer resetting a stateful model once, before its
# step loop, lets every step's graph hang on the previous one.
DECODER = """
import torch
from torch import nn


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRUCell(8, 8)
        self.hidden = None

    def _init_states(self, inputs):
        self.hidden = torch.zeros(inputs.size(0), 8, device=inputs.device)

    def decode(self, frame):
        self.hidden = self.rnn(frame, self.hidden)
        return self.hidden

    def forward(self, inputs):
        self._init_states(inputs)
        return torch.stack([self.decode(f) for f in inputs.unbind(1)], 1)


class Stateful(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRUCell(8, 8)
        self.hidden = None

    def reset(self):
        self.hidden = None

    def forward(self, x):
        self.hidden = self.rnn(x, self.hidden)
        return self.hidden


class Trainer:
    def __init__(self, model: Stateful, opt):
        self.model = model
        self.opt = opt

    def fit(self, loader):
        self.model.reset()
        for x in loader:
            loss = self.model(x.cuda()).sum()
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()


def train_decoder(decoder: Decoder, loader, opt):
    for x in loader:
        loss = decoder(x.cuda()).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
"""


def test_state_rebuilt_at_the_start_of_each_forward_carries_no_graph_across_steps() -> None:
    assert [d.line for d in lint(DECODER, "TL302")] == [34]  # `Stateful.forward`, not `Decoder.decode`


def test_attributes_assigned_together_from_a_tuple_each_take_their_element() -> None:
    code = """
    from torch import nn

    class Trainer:
        def __init__(self, model: nn.Module, opt):
            self.model, self.opt, self.hidden = model, opt, None

        def train_step(self, x):
            out, self.hidden = self.model(x, self.hidden)
            loss = out.mean()
            loss.backward()
            self.opt.step()
    """
    assert [d.line for d in lint(code, "TL302")] == [9]


# coqui's Tacotron: the base class's method runs `self.capacitron_vae_layer(...)`, which the base sets
# to None and each subclass (another module) to the VAE layer of a third module
INHERITED_LAYER = {
    "layers.py": """
        import torch
        from torch import nn


        class CapacitronVAE(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(8, 4)

            def forward(self, mel):
                mu = self.proj(mel)
                stats = mu.cpu()
                return mu, stats
    """,
    "base.py": """
        from torch import nn


        class BaseTacotron(nn.Module):
            def __init__(self):
                super().__init__()
                self.capacitron_vae_layer = None

            def compute_capacitron_embedding(self, inputs, mel):
                outputs, stats = self.capacitron_vae_layer(mel)
                return inputs + outputs
    """,
    "tacotron.py": """
        from torch import nn
        from base import BaseTacotron
        from layers import CapacitronVAE


        class Tacotron(BaseTacotron):
            def __init__(self, use_capacitron):
                super().__init__()
                self.encoder = nn.Linear(8, 4)
                if use_capacitron:
                    self.capacitron_vae_layer = CapacitronVAE()

            def forward(self, text, mel):
                inputs = self.encoder(text)
                return self.compute_capacitron_embedding(inputs, mel)
    """,
    "train.py": """
        import torch
        from tacotron import Tacotron

        model = Tacotron(use_capacitron=True).cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for text, mel in loader:
            loss = model(text.cuda(), mel.cuda()).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """,
}


def test_a_layer_a_subclass_sets_runs_every_step_through_the_method_it_inherits(tmp_path: Path) -> None:
    write(tmp_path, INHERITED_LAYER)
    found = findings(tmp_path, ["layers.py"], select="TL401")
    assert list(found) == ["layers.py:13:TL401"]
    assert found["layers.py:13:TL401"][0][-1] == ("tacotron.py", 16)  # (the inherited method's call)
    # the whole project agrees with the one file
    assert "layers.py:13:TL401" in findings(tmp_path, ["train.py", "base.py", "tacotron.py", "layers.py"], select="TL401")


def test_a_wrapper_module_converted_to_sync_batchnorm_and_wrapped_in_ddp_keeps_its_forward(tmp_path: Path) -> None:
    # DINO's shape: the model class is another module's, moved, converted under a flag, wrapped, and
    # handed to the epoch function; its `forward` builds a host tensor and moves it every step (DINO's
    # own is empty, `torch.empty(0)`, and copies nothing: one row here)
    write(tmp_path, {
        "utils.py": """
            import torch
            import torch.nn as nn


            class MultiCropWrapper(nn.Module):
                def __init__(self, backbone):
                    super().__init__()
                    self.backbone = backbone

                def forward(self, x):
                    output = torch.zeros(1, 8).to(x[0].device)
                    for crop in x:
                        output = torch.cat((output, self.backbone(crop)))
                    return output
        """,
        "main.py": """
            import torch
            import torch.nn as nn
            import utils


            def train_one_epoch(student, loader, optimizer):
                for images in loader:
                    images = [im.cuda(non_blocking=True) for im in images]
                    loss = student(images).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()


            def main(args, loader):
                student = utils.MultiCropWrapper(nn.Linear(8, 8))
                student = student.cuda()
                if args.sync_bn:
                    student = nn.SyncBatchNorm.convert_sync_batchnorm(student)
                student = nn.parallel.DistributedDataParallel(student, device_ids=[args.gpu])
                optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
                train_one_epoch(student, loader, optimizer)
        """,
    })
    expected = {"utils.py:12:TL406": [[("main.py", 10)]]}
    assert findings(tmp_path, ["utils.py"], "TL406") == expected
    assert findings(tmp_path, ["main.py", "utils.py"], "TL406") == expected


def test_an_object_of_a_project_class_on_one_path_and_unknown_on_another_may_run_its_forward(tmp_path: Path) -> None:
    # coqui's encoder recipe: the criterion comes from a method of the model, and under a flag from a
    # tuple a checkpoint loader gives back; either way its `forward` runs every step
    write(tmp_path, {
        "losses.py": """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F


            class AngleProtoLoss(nn.Module):
                def forward(self, x):
                    label = torch.arange(x.shape[0]).to(x.device)
                    return F.cross_entropy(x, label)
        """,
        "encoder.py": """
            import torch
            import torch.nn as nn
            from losses import AngleProtoLoss


            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(8, 8)

                def forward(self, x):
                    return self.fc(x)

                def get_criterion(self):
                    return AngleProtoLoss()

                def load_checkpoint(self, path, criterion=None):
                    state = torch.load(path)
                    criterion.load_state_dict(state["criterion"])
                    return criterion, state["step"]
        """,
        "train.py": """
            import torch
            from encoder import Encoder


            def train(model, optimizer, criterion, loader):
                for x in loader:
                    loss = criterion(model(x.cuda()))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()


            def main(args, loader):
                model = Encoder().cuda()
                optimizer = torch.optim.Adam(model.parameters())
                criterion = model.get_criterion()
                if args.restore_path:
                    criterion, args.restore_step = model.load_checkpoint(args.restore_path, criterion=criterion)
                train(model, optimizer, criterion, loader)
        """,
    })
    expected = {"losses.py:9:TL406": [[("train.py", 8)]]}
    assert findings(tmp_path, ["losses.py"], "TL406") == expected
    assert findings(tmp_path, ["train.py", "encoder.py", "losses.py"], "TL406") == expected


def test_a_model_a_factory_of_another_module_builds_runs_its_forward_through_a_deepspeed_engine(tmp_path: Path) -> None:
    # DeepSpeed-Chat's reward model: main.py imports only the factory, never the class; the engine
    # `deepspeed.initialize` returns runs the model's `forward`, which reads indices on the host
    write(tmp_path, {
        "dschat/__init__.py": "",
        "dschat/reward_model.py": """
            import torch.nn as nn


            class RewardModel(nn.Module):
                def __init__(self, base):
                    super().__init__()
                    self.base = base

                def forward(self, input_ids, use_cache=False):
                    rewards = self.base(input_ids)
                    c_inds = (input_ids == 0).nonzero()
                    c_ind = c_inds[0].item() if len(c_inds) > 0 else input_ids.shape[1]
                    return {"loss": rewards[:, :c_ind].mean()}
        """,
        "dschat/model_utils.py": """
            from transformers import AutoModel
            from dschat.reward_model import RewardModel


            def create_critic_model(path):
                critic_model = AutoModel.from_pretrained(path)
                critic_model = RewardModel(critic_model)
                return critic_model
        """,
        "main.py": """
            import deepspeed
            import torch
            from dschat.model_utils import create_critic_model


            def main(args, loader, device):
                rm_model = create_critic_model(args.model_name_or_path)
                optimizer = torch.optim.AdamW(rm_model.parameters())
                rm_model, optimizer, _, lr_scheduler = deepspeed.initialize(model=rm_model, optimizer=optimizer, args=args)
                for step, batch in enumerate(loader):
                    batch = {k: v.to(device) for k, v in batch.items()}
                    outputs = rm_model(**batch, use_cache=False)
                    rm_model.backward(outputs["loss"])
                    rm_model.step()
        """,
    })
    expected = {"dschat/reward_model.py:13:TL401": [[("main.py", 13)]]}
    assert findings(tmp_path, ["dschat/reward_model.py"], "TL401") == expected
    assert findings(tmp_path, ["main.py", "dschat/model_utils.py", "dschat/reward_model.py"], "TL401") == expected


def test_a_latent_sampled_on_the_host_by_another_module_s_method_and_moved_every_step(tmp_path: Path) -> None:
    # wgan-gp's shape: the generator's module holds no training code; its `sample_latent` draws on the
    # host, and the trainer wraps the draw in a legacy `Variable` and moves it every step
    write(tmp_path, {
        "models.py": """
            import torch
            import torch.nn as nn


            class Generator(nn.Module):
                def __init__(self, latent_dim):
                    super().__init__()
                    self.latent_dim = latent_dim
                    self.net = nn.Linear(latent_dim, 8)

                def forward(self, z):
                    return self.net(z)

                def sample_latent(self, num_samples):
                    return torch.randn((num_samples, self.latent_dim))
        """,
        "training.py": """
            import torch
            from torch.autograd import Variable
            from models import Generator


            class Trainer:
                def __init__(self, generator, optimizer, use_cuda=True):
                    self.G = generator
                    self.G_opt = optimizer
                    self.use_cuda = use_cuda
                    if self.use_cuda:
                        self.G.cuda()

                def sample_generator(self, num_samples):
                    latent_samples = Variable(self.G.sample_latent(num_samples))
                    if self.use_cuda:
                        latent_samples = latent_samples.cuda()
                    return self.G(latent_samples)

                def train(self, loader):
                    for data in loader:
                        self.G_opt.zero_grad()
                        loss = -self.sample_generator(data.size(0)).mean()
                        loss.backward()
                        self.G_opt.step()


            generator = Generator(16)
            Trainer(generator, torch.optim.Adam(generator.parameters())).train([])
        """,
    })
    expected = {"training.py:18:TL406": [[("training.py", 24)]]}
    assert findings(tmp_path, ["training.py"], "TL406") == expected
    assert findings(tmp_path, ["models.py", "training.py"], "TL406") == expected


def _notebook(*cells: str) -> str:
    return json.dumps({
        "cells": [{"cell_type": "code", "metadata": {}, "source": textwrap.dedent(c), "outputs": [], "execution_count": None} for c in cells],
        "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5,
    })


# A tutorial's package and a chapter notebook (d2l's layout): the notebook defines the network and
# trains it, and hands it to the package's prediction helper through the package's module
# (`d2l.predict_sentiment(net, ...)`)
BOOK = {
    "book/__init__.py": "",
    "book/torch.py": """
        import torch

        def predict_sentiment(net, sequence):
            label = torch.argmax(net(sequence.reshape(1, -1)), dim=1)
            return "positive" if label == 1 else "negative"
    """,
}
CHAPTER = _notebook(
    """
    import torch
    from torch import nn
    from book import torch as book
    """,
    """
    class TextCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 2)

        def forward(self, x):
            return self.fc(x)
    """,
    """
    net = TextCNN()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for x, y in train_batches:
        loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    book.predict_sentiment(net, review)
    """,
)


def test_a_notebook_calling_a_package_function_passes_its_network(tmp_path: Path) -> None:
    write(tmp_path, BOOK)
    (tmp_path / "chapter.ipynb").write_text(CHAPTER)
    expected = {"book/torch.py:5:TL303": []}
    assert findings(tmp_path, ["book/torch.py"], "TL303") == expected
    assert findings(tmp_path, ["book/torch.py", "chapter.ipynb"], "TL303") == expected


def test_a_package_function_nobody_hands_a_network_predicts_nothing_known(tmp_path: Path) -> None:
    write(tmp_path, BOOK)
    (tmp_path / "chapter.ipynb").write_text(CHAPTER.replace("book.predict_sentiment(net, review)", "print(net)"))
    assert findings(tmp_path, ["book/torch.py"], "TL303") == {}


# The package's language model and encoder-decoder (d2l's `RNNLMScratch`, `Seq2Seq`): a subclass
# hands its constructor's modules to its base through `super().__init__`, the package names its own
# classes through `book = sys.modules[__name__]`, and each decodes greedily, feeding the `argmax`
# back. A chapter with no training code of its own builds the modules and hands them over; a
# trainer elsewhere does the training.
DECODERS = {
    "book/__init__.py": "",
    "book/torch.py": """
        import sys
        import torch
        from torch import nn
        book = sys.modules[__name__]

        class Decoder(nn.Module):
            pass

        class LanguageModel(nn.Module):
            def __init__(self, rnn, vocab_size):
                super().__init__()
                self.rnn = rnn
                self.vocab_size = vocab_size

            def predict(self, prefix, num_preds):
                state, outputs = None, [prefix[0]]
                for i in range(num_preds):
                    X = torch.tensor([[outputs[-1]]])
                    Y, state = self.rnn(X, state)
                    outputs.append(int(Y.argmax(axis=2).reshape(1)))
                return "".join(str(i) for i in outputs)

        class EncoderDecoder(nn.Module):
            def __init__(self, encoder, decoder):
                super().__init__()
                self.encoder = encoder
                self.decoder = decoder

            def predict_step(self, src, bos, num_steps):
                state = self.decoder.init_state(self.encoder(src))
                outputs, attention_weights = [bos], []
                for _ in range(num_steps):
                    Y, state = self.decoder(outputs[-1], state)
                    outputs.append(Y.argmax(2))
                    attention_weights.append(self.decoder.attention_weights)
                return torch.cat(outputs[1:], 1), attention_weights

            def rollout(self, src, bos, num_steps):
                state = self.decoder.init_state(self.encoder(src))
                outputs = [bos]
                for _ in range(num_steps):
                    Y, state = self.decoder(outputs[-1], state)
                    outputs.append(Y)
                return torch.stack(outputs[1:])

        class Seq2Seq(book.EncoderDecoder):
            def __init__(self, encoder, decoder, lr):
                super().__init__(encoder, decoder)
                self.lr = lr

        class GRUEncoder(book.Decoder):
            def forward(self, X):
                return X
    """,
}
DECODING_CELLS = (
    """
    import torch
    from torch import nn
    from book import torch as book
    """,
    """
    class GRUScratch(nn.Module):
        def forward(self, X, state):
            return X, state

    class GRUDecoder(nn.Module):
        def forward(self, X, state):
            return X, state
    """,
    """
    gru = GRUScratch()
    model = book.LanguageModel(gru, vocab_size=28)
    trainer.fit(model, data)
    model = book.Seq2Seq(book.GRUEncoder(), GRUDecoder(), lr=0.1)
    trainer.fit(model, data)
    """,
)
DECODING_CHAPTER = _notebook(*DECODING_CELLS)


def test_a_chapter_with_no_training_code_hands_its_modules_to_the_package(tmp_path: Path) -> None:
    # each greedy decoder records a graph through the `argmax` it feeds back; `rollout` returns the
    # outputs themselves, which a caller may backpropagate
    write(tmp_path, DECODERS)
    (tmp_path / "chapter.ipynb").write_text(DECODING_CHAPTER)
    expected = {"book/torch.py:20:TL303": [], "book/torch.py:34:TL303": []}
    assert findings(tmp_path, ["book/torch.py"], "TL303") == expected
    assert findings(tmp_path, ["book/torch.py", "chapter.ipynb"], "TL303") == expected


def test_a_chapter_handing_plain_callables_runs_no_module(tmp_path: Path) -> None:
    write(tmp_path, DECODERS)
    # objects called through `__call__`, of classes that are no modules
    plain = [c.replace("(nn.Module):\n        def forward", ":\n        def __call__").replace("book.GRUEncoder()", "GRUDecoder()") for c in DECODING_CELLS]
    assert plain != list(DECODING_CELLS)
    (tmp_path / "chapter.ipynb").write_text(_notebook(*plain))
    assert findings(tmp_path, ["book/torch.py"], "TL303") == {}


# d2l's way of growing classes: the package's `add_to_class` sets a chapter's function on a class,
# the package's `Trainer` or the chapter's own model; `save_hyperparameters`, inherited from the
# package, stores the constructor's arguments as attributes
GROWING = {
    "book/__init__.py": "",
    "book/torch.py": """
        import inspect
        import sys
        import torch
        from torch import nn
        book = sys.modules[__name__]

        def add_to_class(Class):
            def wrapper(obj):
                setattr(Class, obj.__name__, obj)
            return wrapper

        class HyperParameters:
            def save_hyperparameters(self, ignore=[]):
                frame = inspect.currentframe().f_back
                _, _, _, local_vars = inspect.getargvalues(frame)
                for k, v in local_vars.items():
                    if k not in ignore + ["self"]:
                        setattr(self, k, v)

        class Module(nn.Module, book.HyperParameters):
            def training_step(self, batch):
                return nn.functional.cross_entropy(self(batch[0]), batch[1])

        class Trainer(book.HyperParameters):
            def __init__(self, max_epochs, gradient_clip_val=0):
                self.save_hyperparameters()

            def fit(self, model, data):
                self.model = model.cuda()
                self.optim = torch.optim.SGD(self.model.parameters(), lr=0.1)
                for epoch in range(self.max_epochs):
                    for batch in data:
                        loss = self.model.training_step([b.cuda() for b in batch])
                        self.optim.zero_grad()
                        loss.backward()
                        if self.gradient_clip_val > 0:
                            self.clip_gradients(self.gradient_clip_val, self.model)
                        self.optim.step()

            def clip_gradients(self, grad_clip_val, model):
                raise NotImplementedError

        class Decoder(nn.Module):
            def forward(self, X, state):
                return X, state

        class EncoderDecoder(book.Module):
            def __init__(self):
                super().__init__()
                self.decoder = Decoder()
    """,
}
GROWING_CELLS = (
    """
    import torch
    from torch import nn
    from book import torch as book
    """,
    """
    class LanguageModel(book.Module):
        def __init__(self, rnn, vocab_size):
            super().__init__()
            self.save_hyperparameters()

        def forward(self, X):
            return self.rnn(X)[0]
    """,
    """
    @book.add_to_class(book.Trainer)
    def clip_gradients(self, grad_clip_val, model):
        params = [p for p in model.parameters() if p.requires_grad]
        norm = torch.sqrt(sum(torch.sum(p.grad ** 2) for p in params))
        if norm > grad_clip_val:
            for param in params:
                param.grad[:] *= grad_clip_val / norm
    """,
    """
    @book.add_to_class(LanguageModel)
    def predict(self, prefix, num_preds):
        state, outputs = None, [prefix[0]]
        for i in range(num_preds):
            X = torch.tensor([[outputs[-1]]])
            Y, state = self.rnn(X, state)
            outputs.append(int(Y.argmax(axis=2).reshape(1)))
        return "".join(str(i) for i in outputs)
    """,
    """
    @book.add_to_class(book.EncoderDecoder)
    def predict_step(self, bos, state, num_steps):
        outputs = [bos]
        for _ in range(num_steps):
            Y, state = self.decoder(outputs[-1], state)
            outputs.append(Y.argmax(2))
        return torch.cat(outputs[1:], 1)
    """,
    """
    model = LanguageModel(nn.GRU(28, 32), vocab_size=28)
    trainer = book.Trainer(max_epochs=10, gradient_clip_val=1)
    trainer.fit(model, data)
    model.predict([3], 20)
    """,
)


def _growing(tmp_path: Path, cells: "tuple[str, ...] | list[str]", package: "dict[str, str]" = GROWING) -> dict[str, list]:
    write(tmp_path, package)
    (tmp_path / "chapter.ipynb").write_text(_notebook(*cells))
    return {k: v for k, v in findings(tmp_path, ["chapter.ipynb"]).items() if k.endswith((":TL303", ":TL401"))}


def test_functions_a_chapter_sets_on_the_package_trainer_and_its_own_model_are_their_methods(tmp_path: Path) -> None:
    # the trainer's step calls the chapter's `clip_gradients` (cell 3: its `if` reads a device tensor);
    # the model's `predict` (cell 4) runs the GRU its constructor saved, decoding greedily; so does
    # `predict_step` (cell 5) with the decoder the package's class builds
    assert sorted(_growing(tmp_path, GROWING_CELLS)) == ["chapter.ipynb:6:TL303", "chapter.ipynb:6:TL401", "chapter.ipynb:7:TL303"]


def test_an_outline_knows_method_adders_frame_savers_and_what_a_chapter_attaches() -> None:
    # (read by Python's own parser where a module has no training code)
    from trainlint.project.importers import module_outline

    package = module_outline(textwrap.dedent(GROWING["book/torch.py"]), "/p/book/torch.py")
    assert package.functions["add_to_class"].adds_methods
    assert package.classes["HyperParameters"].methods["save_hyperparameters"].saves_arguments
    assert not package.classes["Trainer"].methods["fit"].saves_arguments
    chapter = module_outline(textwrap.dedent(GROWING_CELLS[0]) + textwrap.dedent(GROWING_CELLS[2]), "/p/chapter.ipynb")
    assert chapter.attached == (("book.torch.add_to_class", "book.torch.Trainer", "book.Trainer.clip_gradients"),)


def test_a_decorator_that_only_records_a_function_adds_no_method(tmp_path: Path) -> None:
    registry = dict(GROWING)
    registry["book/torch.py"] = GROWING["book/torch.py"].replace("setattr(Class, obj.__name__, obj)", "REGISTRY[obj.__name__] = obj")
    assert _growing(tmp_path, GROWING_CELLS, registry) == {}


def test_hyperparameters_kept_in_a_dict_by_the_package_set_no_attribute(tmp_path: Path) -> None:
    kept = dict(GROWING)
    kept["book/torch.py"] = GROWING["book/torch.py"].replace("setattr(self, k, v)", "self.hparams[k] = v")
    assert sorted(_growing(tmp_path, GROWING_CELLS, kept)) == ["chapter.ipynb:6:TL303", "chapter.ipynb:6:TL401"]


SHIMS = '''

def cpu():
    return torch.device("cpu")


def gpu():
    return torch.device("cuda")


numpy = lambda x, *args, **kwargs: x.detach().numpy(*args, **kwargs)
to = lambda x, *args, **kwargs: x.to(*args, **kwargs)
'''


def test_a_host_copy_made_by_a_module_s_lambda_shim_is_a_sync() -> None:
    # d2l plots `d2l.numpy(d2l.to(value, d2l.cpu()))`: the shim `to` copies the loss to the host
    shimmed = FRAMEWORK.replace("l.item()", "numpy(to(l, cpu()))") + SHIMS
    found = lint(shimmed, "TL401")
    assert [(d.line, d.message.split(" synchronises")[0]) for d in found] == [(13, "`to(l, cpu())`")]


def test_a_lambda_shim_that_moves_to_the_accelerator_is_no_sync() -> None:
    assert lint(FRAMEWORK.replace("l.item()", "to(l, gpu())") + SHIMS, "TL401") == []


def test_a_script_alone_in_its_project_has_no_callers_until_a_module_calls_it(tmp_path: Path) -> None:
    from trainlint.project.index import Project

    write(tmp_path, {"losses.py": """
        import torch


        def total(loss):
            return loss.item()
    """})
    project = Project()
    target = tmp_path / "losses.py"
    assert project.alone(target) and project.step_seeds(str(target)) == {}
    write(tmp_path, {"train.py": """
        import torch
        from losses import total


        def fit(model, loader, optimizer):
            for x in loader:
                loss = model(x.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                print(total(loss))
    """})
    fresh = Project()
    assert not fresh.alone(target) and list(fresh.step_seeds(str(target))) == ["total"]


STANDALONE_HOOKS = """
    import torch
    from lightning import LightningModule


    class Base({base}):
        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters())


    class Model(Base):
        def training_step(self, batch, batch_idx):
            loss = self.net(batch).mean()
            print(loss.item())
            return loss
"""


def test_a_standalone_script_s_hooks_through_its_own_base_classes(tmp_path: Path) -> None:
    # alone in its project, the script's class hierarchy is read from its own classes: a base
    # deriving from LightningModule makes `training_step` a per-step hook; a plain base does not
    write(tmp_path, {"train.py": STANDALONE_HOOKS.format(base="LightningModule")})
    assert list(findings(tmp_path, ["train.py"], "TL401")) == ["train.py:14:TL401"]
    write(tmp_path, {"train.py": STANDALONE_HOOKS.format(base="object")})
    assert findings(tmp_path, ["train.py"], "TL401") == {}


# An RL layout: the algorithm's module trains (its minibatch loop steps the optimizer) but names no
# device; the script that imports it moves the policy to the GPU and calls `agent.update` per rollout.
PPO_ALGO = """
import torch


class PPO:
    def __init__(self, actor_critic, epochs):
        self.actor_critic = actor_critic
        self.epochs = epochs
        self.optimizer = torch.optim.Adam(actor_critic.parameters(), lr=3e-4)

    def update(self, rollouts):
        value_loss_epoch = 0
        for e in range(self.epochs):
            for obs_batch, return_batch in rollouts.minibatches():
                values = self.actor_critic(obs_batch)
                value_loss = (return_batch - values).pow(2).mean()
                self.optimizer.zero_grad()
                value_loss.backward()
                self.optimizer.step()
                value_loss_epoch += value_loss.item()
        return value_loss_epoch / self.epochs
"""
PPO_MAIN = """
import torch
from algo import PPO
from policy import Policy

device = torch.device("{device}")
actor_critic = Policy()
actor_critic.to(device)
agent = PPO(actor_critic, 4)
for j in range(1000):
    rollouts = collect(envs, actor_critic)
    print(agent.update(rollouts))
"""


def test_a_training_loop_runs_where_the_module_importing_it_puts_the_work(tmp_path: Path) -> None:
    write(tmp_path, {"algo.py": PPO_ALGO, "main.py": PPO_MAIN.format(device="cuda"), "policy.py": "class Policy: ...\n"})
    assert "algo.py:20:TL401" in findings(tmp_path, ["algo.py"], "TL401")


def test_a_training_loop_imported_only_by_cpu_code_reads_nothing_from_a_device(tmp_path: Path) -> None:
    # the same algorithm run by a script whose only device is the CPU, and by one that names none
    write(tmp_path, {"algo.py": PPO_ALGO, "main.py": PPO_MAIN.format(device="cpu"), "policy.py": "class Policy: ...\n"})
    assert not findings(tmp_path, ["algo.py"], "TL401")
    write(tmp_path, {"main.py": PPO_MAIN.replace("actor_critic.to(device)\n", "").replace('device = torch.device("{device}")\n', "")})
    assert not findings(tmp_path, ["algo.py"], "TL401")


# A logger object the step loop calls with host copies (`log(model, loss.cpu(), correct.cpu())`), whose
# `__call__` hands them on to a method that sums and reads them.
LOGGER = """
class Log:
    def __init__(self):
        self.total = 0.0
        self.is_train = True

    def __call__(self, model, loss, accuracy):
        if self.is_train:
            self._train_step(loss, accuracy)

    def _train_step(self, loss, accuracy):
        self.total += loss.sum().item()
        self.total += accuracy.sum().item()
"""
LOGGED_LOOP = """
import torch
from log import Log

log = Log()
model = Net().cuda()
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    predictions = model(x)
    loss = criterion(predictions, y)
    loss.mean().backward()
    optimizer.step()
    correct = torch.argmax(predictions, 1) == y
    log(model, {loss}, {correct})
"""


def test_a_host_copy_handed_through_a_logger_is_read_on_the_host(tmp_path: Path) -> None:
    # the copies are the syncs (one finding, at the call); the logger's reads of them wait for nothing
    write(tmp_path, {"log.py": LOGGER, "train.py": LOGGED_LOOP.format(loss="loss.cpu()", correct="correct.cpu()")})
    found = findings(tmp_path, ["log.py", "train.py"], "TL401")
    assert list(found) == ["train.py:14:TL401"]


def test_a_device_tensor_handed_through_a_logger_is_read_there(tmp_path: Path) -> None:
    # the near miss: the device tensor itself handed on, read by the method `__call__` passes it to
    write(tmp_path, {"log.py": LOGGER, "train.py": LOGGED_LOOP.format(loss="loss.cpu()", correct="correct")})
    found = findings(tmp_path, ["log.py", "train.py"], "TL401")
    assert "log.py:13:TL401" in found and "log.py:12:TL401" not in found


def test_a_counter_method_named_for_periodic_work_gates_in_its_ing_form() -> None:
    # `iter_counter.needs_displaying()` (SPADE's): the -ing form of a word of periodic work is a gate;
    # a word that only ends like one (`padding`) is not
    source = """
import torch
for data in loader:
    loss = model(data.cuda()).mean()
    loss.backward()
    optimizer.step()
    if iter_counter.needs_displaying():
        print(loss.item())
    if self.padding:
        print(loss.item())
"""
    assert [d.line for d in lint(source, select="TL401")] == [10]


def test_type_as_moves_a_tensor_to_the_other_tensors_device() -> None:
    # `t.type_as(x)` takes x's dtype and device: a host-built tensor made like a device tensor is read
    # there; made like a host tensor, it stays on the host
    source = """
import torch
for x, y in loader:
    out = model(x.cuda()) + torch.randn(x.shape[0], device="cuda")
    scale = torch.ones(out.shape[0]).type_as(out)
    if scale.sum() > 0:
        print("scaled")
    weights = torch.ones(3).type_as(torch.zeros(3))
    if weights.sum() > 0:
        print("weighted")
    loss = (out * scale).mean()
    loss.backward()
    optimizer.step()
"""
    assert [d.line for d in lint(source, select="TL401")] == [6]
