"""Steps that a training library runs: a method is a per-step hook because the class derives, through
project bases in any module, from a library class whose trainer calls it every step (DESIGN.md,
"Values, not names"); a method of the same name in a class of no such library is not one. And
values that stay host-built through the arithmetic of a step, the body of a synchronising test, and
branches the steps never take."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.helpers import lines
from trainlint.config import Settings
from trainlint.engine.lint import lint_paths


def lint_tree(tmp_path: Path, files: dict[str, str], paths: list[str] | None = None) -> list[str]:
    (tmp_path / "pyproject.toml").write_text("")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    settings = Settings(root=tmp_path)
    results = lint_paths([(tmp_path / n, settings) for n in (paths or list(files))], jobs=1)
    return sorted(f"{Path(d.path).relative_to(tmp_path).as_posix()}:{d.line}:{d.code}" for r in results for d in r.diagnostics)


# A TTS-style project trained by an external `trainer` package (coqui's): the models derive from it
# through two project bases in two modules, and the module with the model has no device of its own.
TTS = {
    "tts/__init__.py": "",
    "tts/model.py": """
        from trainer import TrainerModel


        class BaseTrainerModel(TrainerModel):
            def init_from_config(self, config):
                raise NotImplementedError
    """,
    "tts/models/__init__.py": "",
    "tts/models/base_tts.py": """
        from tts.model import BaseTrainerModel


        class BaseTTS(BaseTrainerModel):
            pass
    """,
    "tts/layers/__init__.py": "",
    "tts/layers/losses.py": """
        import torch
        from torch import nn


        class SSIMLoss(nn.Module):
            def forward(self, y_hat, y):
                loss = (y_hat - y).abs().mean()
                if loss.item() > 1.0:
                    loss = torch.clamp(loss, max=1.0)
                return loss


        class TacotronLoss(nn.Module):
            def __init__(self):
                super().__init__()
                self.ssim = SSIMLoss()

            def forward(self, outputs, targets):
                return {"loss": self.ssim(outputs, targets)}
    """,
    "tts/models/tacotron.py": """
        from tts.layers.losses import TacotronLoss
        from tts.models.base_tts import BaseTTS


        class Tacotron(BaseTTS):
            def get_criterion(self):
                return TacotronLoss()

            def train_step(self, batch, criterion):
                outputs = self.decoder(batch["text"])
                return outputs, criterion(outputs, batch["mels"])
    """,
    "tts/models/overflow.py": """
        import torch
        from torch import nn

        from tts.models.base_tts import BaseTTS


        class Overflow(BaseTTS):
            def __init__(self):
                super().__init__()
                self.register_buffer("mean", torch.tensor(0.0))
                self.proj = nn.Linear(4, 4)

            def preprocess_batch(self, mels):
                if self.mean.item() == 0:
                    return mels
                return mels - self.mean

            def forward(self, mels):
                return self.proj(self.preprocess_batch(mels))

            def train_step(self, batch, criterion):
                outputs = self.forward(batch["mels"])
                return outputs, {"loss": outputs.mean()}
    """,
    # the same method names in a class of no training library: nothing runs them every step
    "tts/tools/tokenizer.py": """
        import torch


        class Tokenizer:
            def __init__(self):
                self.counts = torch.zeros(4).cuda()

            def train_step(self, batch):
                return self.counts.sum().item()
    """,
}


def test_a_library_hook_is_found_through_project_bases_in_other_modules(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, TTS)
    assert "tts/models/overflow.py:15:TL401" in found  # `self.mean.item()` in a method `train_step` reaches
    assert not any(f.startswith("tts/tools/") for f in found), found


def test_the_criterion_a_library_passes_to_a_hook_is_the_model_s_own(tmp_path: Path) -> None:
    # coqui's Trainer calls `model.train_step(batch, criterion)` with `model.get_criterion()`: the loss
    # module's `forward`, and the SSIM loss it runs, run every step
    assert "tts/layers/losses.py:9:TL401" in lint_tree(tmp_path, TTS)


def test_one_file_and_the_whole_project_agree_on_library_hooks(tmp_path: Path) -> None:
    whole = [f for f in lint_tree(tmp_path, TTS) if f.startswith("tts/models/overflow.py")]
    alone = lint_tree(tmp_path, {}, paths=["tts/models/overflow.py"])
    assert alone == whole and whole


def test_lightning_hooks_through_a_project_base_class(tmp_path: Path) -> None:
    files = {
        "base.py": """
            import pytorch_lightning as pl


            class Base(pl.LightningModule):
                pass
        """,
        "model.py": """
            from base import Base


            class Classifier(Base):
                def training_step(self, batch, batch_idx):
                    loss = self.net(batch).mean()
                    self.history.append(loss.item())
                    return loss
        """,
        "plain.py": """
            import torch


            class Runner:
                def training_step(self, batch):
                    return torch.ones(2).cuda().sum().item()
        """,
    }
    found = lint_tree(tmp_path, files)
    assert "model.py:8:TL401" in found
    assert not any(f.startswith("plain.py") for f in found), found


def test_a_tensor_computed_from_host_factories_is_host_built() -> None:
    code = """
        import torch

        for images in loader:
            features = model(images.cuda())
            labels = torch.cat([torch.arange(batch_size) for _ in range(2)], dim=0)
            labels = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()
            labels = labels.to(device)
            noise = torch.normal(0, 1, size=(4, 8))
            noise = noise.to(device)
            batch_labels = targets.cuda() == torch.arange(4)
            batch_labels = batch_labels.to(device)
            loss = criterion(features, labels)
            loss.backward()
            optimizer.step()
    """
    # the batch compared with a factory's tensor is data, not host-built
    assert lines(code, "TL406") == [8, 10]


def test_the_body_of_a_synchronising_test_is_not_a_second_sync() -> None:
    code = """
        import torch

        def wav_to_spec(y):
            if torch.min(y) < -1.0:
                print("min value is ", torch.min(y))
            if torch.max(y) > 1.0:
                print(f"max value is {torch.max(y)}")
            return y.abs()

        for wav in loader:
            spec = wav_to_spec(wav.cuda())
            loss = model(spec).mean()
            loss.backward()
            optimizer.step()
    """
    assert lines(code, "TL401") == [5, 7]


# A trainer whose loop lives in a project base class and whose loss is each subclass's override, in
# another module (RLHF-style): the base calls `self.compute_loss(batch)` every step.
OVERRIDES = {
    "trainers/__init__.py": "",
    "trainers/base_trainer.py": """
        import torch


        class BaseTrainer:
            def __init__(self, model, optimizer, loader):
                self.model = model.cuda()
                self.optimizer = optimizer
                self.loader = loader

            def compute_loss(self, batch):
                raise NotImplementedError

            def fit(self):
                for batch in self.loader:
                    loss = self.compute_loss(batch)
                    loss.backward()
                    self.optimizer.step()
                    self.optimizer.zero_grad()
    """,
    "trainers/dpo_trainer.py": """
        import torch

        from trainers.base_trainer import BaseTrainer


        class DPOTrainer(BaseTrainer):
            def compute_loss(self, batch):
                chosen, rejected = self.model(batch)
                loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
                self.metrics = {"accuracy": (chosen > rejected).float().mean().item()}
                return loss

            def evaluate(self, batch):
                return self.model(batch).mean().item()
    """,
}


def test_an_override_called_by_a_base_class_step_loop_in_another_module_is_per_step(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, OVERRIDES)
    assert "trainers/dpo_trainer.py:11:TL401" in found
    assert "trainers/dpo_trainer.py:15:TL401" not in found  # `evaluate` is no override the loop calls
    alone = lint_tree(tmp_path, {}, paths=["trainers/dpo_trainer.py"])
    assert alone == [f for f in found if f.startswith("trainers/dpo_trainer.py")]


def test_a_fallback_branch_that_only_the_error_path_asks_for_is_not_every_step() -> None:
    code = """
        import torch

        class Head(torch.nn.Module):
            def assign(self, boxes, preds, mode="gpu"):
                if mode == "cpu":
                    boxes = boxes.cpu().float()
                    preds = preds.cpu()
                return (boxes - preds).abs().sum().item()

            def forward(self, boxes, preds):
                try:
                    n = self.assign(boxes, preds)
                except RuntimeError:
                    torch.cuda.empty_cache()
                    n = self.assign(boxes, preds, "cpu")
                return preds.mean() * n

        head = Head().cuda()
        for boxes, preds in loader:
            loss = head(boxes.cuda(), preds.cuda())
            loss.backward()
            optimizer.step()
    """
    # the `.item()` runs every step; the `.cpu()` copies only when the error path asks for "cpu"
    assert lines(code, "TL401") == [9]
    # a caller on the step path that asks for the fallback takes it
    taken = code.replace("n = self.assign(boxes, preds)\n", 'n = self.assign(boxes, preds, mode="cpu")\n')
    assert lines(taken, "TL401") == [7, 8, 9]


def test_a_host_built_chain_moved_by_type_as_or_from_an_attribute() -> None:
    code = """
        import torch

        class Head(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.table = torch.arange(64).float()

            def forward(self, x, lengths):
                strides = torch.zeros(1, x.shape[1]).fill_(8).type_as(x)
                picks = (torch.rand([x.shape[0]]).type_as(x) * lengths).long()
                counts = torch.zeros(4)
                offsets = torch.arange(4).type_as(counts)
                table = self.table[: x.shape[1]].to(x.device)
                return x * strides + table + picks.sum() + offsets.sum()

        head = Head().cuda()
        for x, lengths in loader:
            loss = head(x.cuda(), lengths.cuda()).mean()
            loss.backward()
            optimizer.step()
    """
    # `offsets` takes the type of a host tensor: it stays where it was built
    assert lines(code, "TL406") == [10, 11, 14]


def test_a_tensor_moved_once_and_minibatches_of_a_host_buffer_are_not_rebuilt_each_step() -> None:
    code = """
        import torch

        class Diffusion(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.noise_level = torch.linspace(0, 1, 50)

            def forward(self, y):
                self.noise_level = self.noise_level.to(y)
                return y * self.noise_level[:, None].mean()

        model = Diffusion().cuda()
        storage = torch.zeros(1000, 8)
        for step in range(100):
            idx = torch.randint(0, 1000, (32,))
            rows = storage[idx].to(torch.float32).to("cuda")
            noise = torch.randn(32, 8).cuda()
            loss = model(rows + noise).mean()
            loss.backward()
            optimizer.step()
    """
    # the level replaces itself with its device copy; the rows are stored data picked per step
    assert lines(code, "TL406") == [18]


def test_minibatches_of_a_host_buffer_reshaped_by_a_helper_are_stored_data() -> None:
    code = """
        import torch

        def flatten01(arr):
            return arr.reshape((-1, *arr.shape[2:]))

        logits = torch.zeros(128, 8, 15)
        for update in range(100):
            for i in range(8):
                rows = flatten01(logits[:, i]).to("cuda")
                noise = flatten01(torch.randn(128, 1, 15)).to("cuda")
                loss = agent.kl(rows, noise)
                loss.backward()
                optimizer.step()
    """
    # the helper gives back a view of what it is given: rows of the buffer, or a draw made here
    assert lines(code, "TL406") == [11]


def test_rows_gathered_from_host_features_by_index_select_are_a_minibatch() -> None:
    code = """
        import numpy as np
        import torch
        from torch.autograd import Variable

        def train_epoch(model, optimizer, features, batch_size):
            features = torch.FloatTensor(features)
            order = list(np.random.permutation(len(features)))
            for i in range(0, len(features), batch_size):
                idx = torch.LongTensor(order[i:i + batch_size])
                batch = Variable(features.index_select(0, idx)).cuda()
                eye = torch.eye(8).index_select(0, torch.tensor([0, 1])).cuda()
                loss = model(batch + eye.sum()).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """
    # SentEval's ranking probe gathers each minibatch from the task's features; an identity matrix
    # built every step is still flagged, whatever rows it keeps
    assert lines(code, "TL406") == [12]


# trl's legacy PPOTrainer: the subclass's loop calls the library's own `self.step(...)`, which runs the
# PPO update and calls the subclass's `batched_forward_pass` override; the rollout lists hold the CPU
# copies `get_inputs` makes, read on the host afterwards.
PPO = """
import torch
from trl import PPOTrainer


class CustomPPOTrainer(PPOTrainer):
    def ppo_train(self, max_steps):
        dataiter = iter(self.dataloader)
        for step in range(max_steps):
            batch = next(dataiter)
            queries, responses = self.get_inputs(batch)
            rewards = self.get_rewards(queries, responses)
            stats = self.step(queries, responses, rewards)
            self.log(torch.stack(rewards).mean().item())

    def get_inputs(self, batch):
        output = self.model.generate(**batch)
        query = batch["input_ids"].detach().cpu()
        queries = []
        for i in range(len(query)):
            start = (query[i] != self.pad_token_id).nonzero()[0].item()
            queries.append(query[i, start:])
        return queries, output

    def get_rewards(self, queries, responses):
        return [self.reward_model(q.to(self.device)).mean() for q in queries]

    def batched_forward_pass(self, model, queries, responses, model_inputs):
        attention_mask = model_inputs["attention_mask"]
        return [attention_mask[j].nonzero()[0].item() for j in range(len(queries))]
"""


def test_a_trl_ppo_subclass_steps_through_the_library_s_own_step():
    # the loop's read of the rewards, the copy of the device batch, and the override the library calls
    # every step; not the read of the CPU copy (`query[i]` of a `.cpu()`), which waits for nothing
    assert lines(PPO, "TL401") == [14, 18, 30]
    # the same class deriving from no library: `self.step` is its own method, nothing is a step
    assert lines(PPO.replace("(PPOTrainer)", "(object)"), "TL401") == []


def test_a_list_filled_by_appends_holds_what_was_appended():
    """`queries = []` then `queries.append(query[i])` of a host copy: its elements live on the host,
    also where another function receives the list (declared `list[Tensor]`)."""
    code = """
    import torch

    def collect(batch):
        query = batch.detach().cpu()
        out, other = [], []
        for i in range(len(query)):
            out.append(query[i])
        return out

    def use(queries: list[torch.Tensor]):
        total = 0.0
        for q in queries:
            total += q.sum().item()
        return total

    def train(model, loader, optimizer):
        model.cuda()
        for batch in loader:
            use(collect(batch.cuda()))
            model(batch.cuda()).sum().backward()
            optimizer.step()
    """
    # the copy of what `collect` is passed, reported where the step passes it on the device (the
    # call, TL401's helper placement), not the reads of its elements
    assert lines(code, "TL401") == [20]
    assert lines(code.replace("query = batch.detach().cpu()", "query = batch.detach()"), "TL401") == [14]


# A GAN-style TTS model trained by coqui's Trainer: `train_step(batch, criterion, optimizer_idx)` is
# called once per optimizer in every step, so `if optimizer_idx == 0:` is the generator's pass.
GAN_TTS = {
    **{k: v for k, v in TTS.items() if k in ("tts/__init__.py", "tts/model.py", "tts/models/__init__.py", "tts/models/base_tts.py")},
    "tts/layers/__init__.py": "",
    "tts/layers/masks.py": """
        import torch


        def mask_from_lengths(lengths):
            max_len = torch.max(lengths).item()
            return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]
    """,
    "tts/models/gan_tts.py": """
        from tts.layers.masks import mask_from_lengths
        from tts.models.base_tts import BaseTTS


        class GanTTS(BaseTTS):
            def forward(self, x, lengths):
                mask = mask_from_lengths(lengths)
                return self.generator(x) * mask

            def train_step(self, batch, criterion, optimizer_idx):
                if optimizer_idx == 0:
                    return self.forward(batch["x"], batch["lengths"]), {}
                return self.discriminator(batch["y"]), {}

            def log_step(self, batch, batch_idx):
                if batch_idx == 0:
                    return mask_from_lengths(batch["lengths"])
    """,
}


def test_a_hook_s_optimizer_index_selects_a_pass_of_every_step_not_a_first_step(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, GAN_TTS)
    assert "tts/layers/masks.py:6:TL401" in found, found  # via the generator pass of `train_step`
    # the same test in a method no library calls per step, on a batch counter, stays a gate
    assert "tts/models/gan_tts.py:16:TL401" not in found


def test_star_arguments_hold_what_the_calls_pass() -> None:
    code = """
        import torch

        class Accumulator:
            def __init__(self, n):
                self.data = [0.0] * n

            def add(self, *args):
                self.data = [a + float(b) for a, b in zip(self.data, args)]

        def train(net, loader, optimizer):
            metric = Accumulator(2)
            for X, y in loader:
                X, y = X.cuda(), y.cuda()
                l = torch.nn.functional.cross_entropy(net(X), y)
                optimizer.zero_grad()
                l.backward()
                optimizer.step()
                metric.add(l * X.shape[0], X.shape[0])
    """
    assert lines(code, "TL401") == [9]
    # given numbers only (the loss already read, once, by the caller's gated logging): nothing to flag
    host = code.replace("metric.add(l * X.shape[0], X.shape[0])", "metric.add(3.0, X.shape[0])")
    assert lines(host, "TL401") == []


def test_a_loss_module_reached_through_an_inherited_criterion_is_per_step(tmp_path: Path) -> None:
    # coqui's Tacotron2: its base class (another module) imports the loss and builds it in
    # `get_criterion`; the subclass's `train_step` runs it every step without importing its module
    files = {
        **{k: v for k, v in TTS.items() if k in ("tts/__init__.py", "tts/model.py", "tts/models/__init__.py", "tts/models/base_tts.py")},
        "tts/layers/__init__.py": "",
        "tts/layers/guided.py": """
            import torch
            from torch import nn


            class GuidedAttentionLoss(nn.Module):
                def forward(self, att_ws, ilens):
                    masks = torch.zeros(att_ws.shape[0], 8, 8)
                    return (att_ws * masks.to(att_ws.device)).mean()
        """,
        "tts/models/base_tacotron.py": """
            from tts.layers.guided import GuidedAttentionLoss
            from tts.models.base_tts import BaseTTS


            class BaseTacotron(BaseTTS):
                def __init__(self):
                    super().__init__()
                    self.decoder_backward = None  # (forward-backward decoding)

                def get_criterion(self):
                    return GuidedAttentionLoss()
        """,
        "tts/models/tacotron2.py": """
            from tts.models.base_tacotron import BaseTacotron


            class Tacotron2(BaseTacotron):
                def train_step(self, batch, criterion):
                    outputs = self.decoder(batch["text"])
                    return outputs, criterion(outputs, batch["lengths"])
        """,
    }
    whole = lint_tree(tmp_path, files)
    assert "tts/layers/guided.py:9:TL406" in whole, whole
    assert lint_tree(tmp_path, {}, paths=["tts/layers/guided.py"]) == ["tts/layers/guided.py:9:TL406"]


# An SFT trainer (LLaMA-Factory-style) that picks its loss by a flag: the HF `Trainer` calls the
# function bound to `self.compute_loss_func` from its `compute_loss` every step.
LOSS_FUNC = {
    "sft/__init__.py": "",
    "sft/losses.py": """
        import torch


        def masked_loss(outputs, labels, num_items_in_batch=None):
            logits = outputs["logits"].float()
            labels = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:].to(logits.device)
            per_token = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
            valid = labels != -100
            if not valid.any():
                return logits.sum() * 0
            return per_token[valid].mean()


        def scaled_loss(outputs, labels, num_items_in_batch=None, alpha=1.0):
            logits = outputs["logits"].float().to("cuda")
            if logits.isnan().any():
                return logits.sum() * 0
            return alpha * logits.mean()
    """,
    "sft/trainer.py": """
        from functools import partial

        from transformers import Seq2SeqTrainer

        from sft.losses import masked_loss, scaled_loss


        class SFTTrainer(Seq2SeqTrainer):
            def __init__(self, use_masked, alpha, **kwargs):
                super().__init__(**kwargs)
                if use_masked:
                    self.compute_loss_func = masked_loss
                else:
                    self.compute_loss_func = partial(scaled_loss, alpha=alpha)
    """,
}


def test_a_function_bound_to_the_trainer_s_per_step_loss_attribute_runs_every_step(tmp_path: Path) -> None:
    assert lint_tree(tmp_path, LOSS_FUNC) == ["sft/losses.py:10:TL401", "sft/losses.py:17:TL401"]
    assert lint_tree(tmp_path, LOSS_FUNC, ["sft/losses.py"]) == ["sft/losses.py:10:TL401", "sft/losses.py:17:TL401"]


def test_a_function_bound_to_the_same_attribute_of_a_class_no_trainer_calls_is_not_per_step(tmp_path: Path) -> None:
    files = dict(LOSS_FUNC, **{"sft/trainer.py": LOSS_FUNC["sft/trainer.py"].replace("(Seq2SeqTrainer)", "").replace("super().__init__(**kwargs)", "pass")})
    assert lint_tree(tmp_path, files) == []


# A plugin registry (LLaMA-Factory's v1 style): implementations registered by name under a plugin
# class, and a trainer calling through an instance of it, `Plugin(name).method(...)` or `Plugin(name)(...)`.
REGISTRY = {
    "plugins.py": """
        class BasePlugin:
            _registry = {}

            def __init_subclass__(cls, **kwargs):
                cls._registry = {}

            def __init__(self, name):
                self.name = name

            def register(self):
                def decorator(obj):
                    type(self)._registry[self.name] = obj
                    return obj

                return decorator

            def __getattr__(self, attr):
                return getattr(type(self)._registry[self.name], attr)

            def __call__(self, *args, **kwargs):
                return type(self)._registry[self.name](*args, **kwargs)
    """,
    "backends.py": """
        import torch

        from plugins import BasePlugin


        class ClipPlugin(BasePlugin):
            pass


        class LossPlugin(BasePlugin):
            pass


        @ClipPlugin("fsdp").register()
        class FSDPClip:
            @staticmethod
            def clip_grad_norm(model, max_norm):
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                return float(norm.item())


        @LossPlugin("token_mean").register()
        def token_mean_loss(model, batch):
            mask = batch["mask"].cuda()
            logits = model(batch["input_ids"].cuda())
            return (logits.sum(-1) * mask).sum() / mask.sum().item()
    """,
    "trainer.py": """
        from backends import ClipPlugin, LossPlugin


        def train(model, loader, optimizer, backend):
            model.cuda()
            for batch in loader:
                loss = LossPlugin("token_mean")(model, batch)
                loss.backward()
                ClipPlugin(backend).clip_grad_norm(model, 1.0)
                optimizer.step()
                optimizer.zero_grad()
    """,
}


def test_what_a_plugin_registry_dispatches_to_by_name_runs_every_step(tmp_path: Path) -> None:
    assert lint_tree(tmp_path, REGISTRY) == ["backends.py:20:TL401", "backends.py:27:TL401"]
    assert lint_tree(tmp_path, REGISTRY, ["backends.py"]) == ["backends.py:20:TL401", "backends.py:27:TL401"]


def test_an_implementation_registered_under_another_plugin_is_not_what_the_trainer_runs(tmp_path: Path) -> None:
    files = dict(REGISTRY, **{"backends.py": REGISTRY["backends.py"].replace('@ClipPlugin("fsdp")', '@LossPlugin("fsdp")')})
    assert lint_tree(tmp_path, files) == ["backends.py:27:TL401"]


# DeiT/MAE: the engine's epoch function is handed a loss scaler by the script; calling it scales and
# backpropagates the loss, clips when given `clip_grad`, and steps the optimizer
ENGINE = """
    import torch

    def train_one_epoch(model, criterion, loader, optimizer, loss_scaler, max_norm=None):
        for samples, targets in loader:
            samples, targets = samples.cuda(), targets.cuda()
            with torch.cuda.amp.autocast():
                loss = criterion(model(samples), targets)
            loss_value = loss.item()
            optimizer.zero_grad()
            loss_scaler(loss, optimizer, clip_grad=max_norm, parameters=model.parameters())
"""
MAIN = """
    import torch
    from timm.utils import NativeScaler
    from engine import train_one_epoch

    model = torch.nn.Linear(4, 2).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    train_one_epoch(model, torch.nn.CrossEntropyLoss(), loader, optimizer, NativeScaler(), max_norm=1.0)
"""


def test_timm_s_loss_scaler_handed_to_the_engine_steps_there(tmp_path: Path) -> None:
    assert lint_tree(tmp_path, {"engine.py": ENGINE, "main.py": MAIN}, paths=["engine.py"]) == ["engine.py:9:TL401"]


def test_an_object_called_a_loss_scaler_whose_class_is_not_known_is_not_a_step(tmp_path: Path) -> None:
    main = MAIN.replace("from timm.utils import NativeScaler", "from apex_helpers import NativeScaler")
    assert lint_tree(tmp_path, {"engine.py": ENGINE, "main.py": main}, paths=["engine.py"]) == []


# MAE's own scaler: it clips only when a call gives it `clip_grad`
SCALER = """
    import torch

    class NativeScalerWithGradNormCount:
        def __init__(self):
            self._scaler = torch.cuda.amp.GradScaler()

        def __call__(self, loss, optimizer, clip_grad=None, parameters=None):
            self._scaler.scale(loss).backward()
            if clip_grad is not None:
                self._scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
            self._scaler.step(optimizer)
            self._scaler.update()
"""


def test_a_project_scaler_clips_where_a_call_gives_it_a_threshold(tmp_path: Path) -> None:
    main = MAIN.replace("from timm.utils import NativeScaler", "from util import NativeScalerWithGradNormCount as NativeScaler")
    engine = ENGINE.replace("    import torch\n", "    import torch\n    import util\n", 1)  # (its metric logger, say)
    files = {"engine.py": engine, "main.py": main, "util.py": SCALER}
    assert [f for f in lint_tree(tmp_path, files, paths=["engine.py"]) if "TL202" in f] == []
    unclipped = dict(files, **{"engine.py": files["engine.py"].replace("clip_grad=max_norm, ", "")})
    assert [f for f in lint_tree(tmp_path, unclipped, paths=["engine.py"]) if "TL202" in f] == ["engine.py:8:TL202"]


def test_a_legacy_cuda_constructor_given_an_array_numpy_draws_copies_it_every_step() -> None:
    code = """
        import numpy as np
        import torch

        for imgs, _ in loader:
            real = imgs.type(torch.cuda.FloatTensor)
            z = torch.cuda.FloatTensor(np.random.normal(0, 1, (imgs.shape[0], 128)))
            buffer = torch.cuda.FloatTensor(imgs.shape[0], 128)
            batch = torch.cuda.FloatTensor(imgs.numpy())
            loss = (gen(z) - real).pow(2).mean() + buffer.sum() + batch.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    # AutoGAN's noise: NumPy draws it on the host, the CUDA constructor copies it; given sizes it
    # allocates on the device, and the batch's own array is data
    assert lines(code, "TL406") == [7]
