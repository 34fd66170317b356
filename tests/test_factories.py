"""Objects made by factories and methods in other modules: a factory in a module with no training code
that returns an instance of one of several imported classes, a method inherited from a base class in a
third module that builds the loss, a list of loss modules a training library passes to a hook and the
hook indexes. The loss module's `forward` runs every step wherever the object came from."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lines
from tests.test_indirect_calls import GNN_NETS
from tests.test_library_hooks import lint_tree

# coqui's speaker encoder: `setup_encoder_model(c)` (a module with no training code) builds one of
# two encoders; their base class, in a third module, builds the loss in `get_criterion`
ENCODER = {
    "enc/__init__.py": "",
    "enc/losses.py": """
        import torch
        from torch import nn


        class AngleProtoLoss(nn.Module):
            def forward(self, x):
                n = x.shape[0]
                label = torch.arange(n).to(x.device)
                return nn.functional.cross_entropy(x, label)


        class GE2ELoss(nn.Module):
            def forward(self, x):
                return x.pow(2).mean()
    """,
    "enc/models/__init__.py": "",
    "enc/models/base.py": """
        from torch import nn

        from enc.losses import AngleProtoLoss, GE2ELoss


        class BaseEncoder(nn.Module):
            def get_criterion(self, c):
                if c.loss == "ge2e":
                    criterion = GE2ELoss()
                else:
                    criterion = AngleProtoLoss()
                return criterion
    """,
    "enc/models/lstm.py": """
        from torch import nn

        from enc.models.base import BaseEncoder


        class LSTMEncoder(BaseEncoder):
            def __init__(self, dim):
                super().__init__()
                self.lstm = nn.LSTM(dim, dim)

            def forward(self, x):
                return self.lstm(x)[0]
    """,
    "enc/models/resnet.py": """
        from torch import nn

        from enc.models.base import BaseEncoder


        class ResNetEncoder(BaseEncoder):
            def __init__(self, dim):
                super().__init__()
                self.fc = nn.Linear(dim, dim)

            def forward(self, x):
                return self.fc(x)
    """,
    "enc/factory.py": """
        from enc.models.lstm import LSTMEncoder
        from enc.models.resnet import ResNetEncoder


        def setup_encoder_model(config):
            if config.model == "lstm":
                model = LSTMEncoder(config.dim)
            elif config.model == "resnet":
                model = ResNetEncoder(config.dim)
            return model
    """,
    "train_encoder.py": """
        import torch

        from enc.factory import setup_encoder_model


        def train(model, criterion, loader, optimizer):
            for x in loader:
                x = x.cuda(non_blocking=True)
                loss = criterion(model(x))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


        def main(c, loader):
            model = setup_encoder_model(c).cuda()
            optimizer = torch.optim.Adam(model.parameters())
            criterion = model.get_criterion(c)
            train(model, criterion, loader, optimizer)
    """,
}


def test_a_loss_built_by_an_inherited_method_of_a_factory_s_model_runs_every_step(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, ENCODER)
    assert "enc/losses.py:9:TL406" in found, found
    assert lint_tree(tmp_path, {}, paths=["enc/losses.py"]) == ["enc/losses.py:9:TL406"]


def test_a_factory_returning_something_else_on_one_path_says_nothing(tmp_path: Path) -> None:
    # `return None` on one path: the result is not surely one of the classes, so no forward is followed
    files = dict(ENCODER)
    files["enc/factory.py"] = ENCODER["enc/factory.py"].replace("            return model", "            return model if config.ok else None")
    assert "enc/losses.py:9:TL406" not in lint_tree(tmp_path, files)


# coqui's VITS: the trainer passes `model.get_criterion()` (a list: discriminator loss, generator loss)
# as `criterion`, annotated `nn.Module`, and `train_step` calls `criterion[optimizer_idx](...)`
VITS = {
    "tts/__init__.py": "",
    "tts/losses.py": """
        import torch
        from torch import nn


        class DiscriminatorLoss(nn.Module):
            @staticmethod
            def discriminator_loss(scores_real, scores_fake):
                loss = 0
                real_losses = []
                for dr, dg in zip(scores_real, scores_fake):
                    real_loss = torch.mean((1 - dr) ** 2)
                    loss += real_loss + torch.mean(dg**2)
                    real_losses.append(real_loss.item())
                return loss, real_losses

            def forward(self, real, fake):
                loss, _ = self.discriminator_loss(real, fake)
                return {"loss": loss}


        class GeneratorLoss(nn.Module):
            def forward(self, fake):
                return {"loss": torch.mean((1 - fake) ** 2)}
    """,
    "tts/vits.py": """
        from torch import nn
        from trainer import TrainerModel


        class Vits(TrainerModel):
            def get_criterion(self):
                from tts.losses import DiscriminatorLoss, GeneratorLoss

                return [DiscriminatorLoss(), GeneratorLoss()]

            def train_step(self, batch, criterion: nn.Module, optimizer_idx: int):
                if optimizer_idx == 0:
                    real, fake = self.disc(batch["wav"]), self.disc(self.gen(batch["text"]))
                    return {}, criterion[optimizer_idx](real, fake)
                return {}, criterion[optimizer_idx](self.disc(self.gen(batch["text"])))
    """,
}


def test_a_list_of_losses_a_library_passes_to_a_hook_runs_the_indexed_module(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, VITS)
    assert "tts/losses.py:14:TL401" in found, found
    assert lint_tree(tmp_path, {}, paths=["tts/losses.py"]) == ["tts/losses.py:14:TL401"]


def test_a_hook_of_no_library_gets_no_library_argument(tmp_path: Path) -> None:
    files = dict(VITS)
    files["tts/vits.py"] = VITS["tts/vits.py"].replace("from trainer import TrainerModel", "TrainerModel = object")
    assert "tts/losses.py:14:TL401" not in lint_tree(tmp_path, files)


def test_concatenated_host_factories_moved_every_step() -> None:
    source = """
        import torch

        def train(model, loader, opt):
            for x in loader:
                b, t = x.shape
                alpha = torch.cat([torch.ones([b, 1]), torch.zeros([b, t])[:, :-1] + 1e-7], dim=1).to(x.device)
                mixed = torch.cat([torch.ones([b, 1]), x.cpu()], dim=1).to(x.device)
                loss = model(x, alpha, mixed).sum()
                loss.backward()
                opt.step()
    """
    assert lines(source, "TL406") == [7]  # not the one holding data


# torchrl's layout: a project package whose name starts with "torch", its loss re-exported by the
# package's `__init__`, imported inside `main` and called by a nested `update` every step; the loss
# reads an entropy it cannot know the type of with a tensor-only method
TORCHRL = {
    "torchkit/__init__.py": "",
    "torchkit/objectives/__init__.py": "from torchkit.objectives.ppo import ClipPPOLoss\n",
    "torchkit/objectives/ppo.py": """
        from torch import nn


        class ClipPPOLoss(nn.Module):
            def __init__(self, actor):
                super().__init__()
                self.actor = actor

            def _get_entropy(self, dist):
                entropy = dist.entropy()
                if not entropy.isfinite().all():
                    entropy = dist.log_prob(dist.rsample()).neg()
                return entropy

            def forward(self, batch):
                dist = self.actor.get_dist(batch)
                return -self._get_entropy(dist).mean()
    """,
    "examples/ppo.py": """
        import torch


        def main(actor, collector):
            from torchkit.objectives import ClipPPOLoss

            loss_module = ClipPPOLoss(actor)
            optim = torch.optim.Adam(loss_module.parameters())

            def update(batch):
                batch = batch.to("cuda", non_blocking=True)
                optim.zero_grad()
                loss = loss_module(batch)
                loss.backward()
                optim.step()

            for batch in collector:
                update(batch)
    """,
}


def test_a_tensor_a_step_helper_builds_from_the_batch_it_is_handed_is_data() -> None:
    # lffont's trainer: `torch.LongTensor([*map(len, trg_comp_ids)]).cuda()` in a helper the step loop
    # hands its batch's lists: the batch's own values, which must cross to the device (TL406 reports
    # constants the code could build there)
    source = """
        import torch
        from itertools import chain

        class Trainer:
            def add_losses(self, out, comp_ids):
                lens = torch.LongTensor([*map(len, comp_ids)]).cuda()
                flat = torch.LongTensor([*chain(*comp_ids)]).cuda()
                sos = torch.LongTensor([*map(len, [[1], [2, 3]])]).cuda()
                return out.repeat_interleave(lens, dim=0).sum() + flat.sum() + sos.sum()

            def train(self, model, loader, opt):
                for x, comp_ids in loader:
                    loss = self.add_losses(model(x.cuda()), comp_ids)
                    loss.backward()
                    opt.step()
    """
    assert lines(source, "TL406") == [9]  # only the list written in the code
    # handed a list the code writes, the helper's tensors are constants built on the host every step
    constant = source.replace("self.add_losses(model(x.cuda()), comp_ids)", "self.add_losses(model(x.cuda()), [[0], [1, 2]])")
    assert lines(constant, "TL406") == [7, 8, 9]


def test_a_project_package_named_like_torch_is_the_project_s(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, TORCHRL)
    assert "torchkit/objectives/ppo.py:12:TL401" in found, found
    assert lint_tree(tmp_path, {}, paths=["torchkit/objectives/ppo.py"]) == ["torchkit/objectives/ppo.py:12:TL401"]


def test_a_tensor_only_method_makes_a_tensor_and_numpy_s_function_does_not() -> None:
    source = """
        import numpy as np

        def train(model, loader, opt):
            for x in loader:
                out = model(x.cuda())
                if not out.stats.isfinite().all():
                    continue
                if not np.isfinite(np.ones(3)).all():
                    continue
                loss = out.loss
                loss.backward()
                opt.step()
    """
    assert lines(source, "TL401") == [7]


# improved-diffusion's `create_model_and_diffusion(...)`: a module with no training code whose factory
# calls two factories of its own and returns both objects as a tuple, which the script unpacks
PAIR = {
    "diff/__init__.py": "",
    "diff/nets.py": """
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.fc = nn.Linear(width, width)

            def forward(self, x):
                return self.fc(x)


        class Schedule:
            def __init__(self, steps):
                self.steps = steps

            def losses(self, model, x):
                out = model(x)
                peak = out.max().item()
                return {"loss": out.mean() / peak}
    """,
    "diff/factory.py": """
        from .nets import Net, Schedule


        def build_net(width):
            return Net(width)


        def build_schedule(steps, rescale=False):
            if rescale:
                steps = steps * 2
            return Schedule(steps)


        def build_both(width, steps):
            net = build_net(width)
            schedule = build_schedule(steps)
            return net, schedule
    """,
    "train.py": """
        import torch
        from diff.factory import build_both


        def main():
            model, schedule = build_both(8, 100)
            model.cuda()
            opt = torch.optim.Adam(model.parameters())
            for step in range(1000):
                x = torch.randn(4, 8, device="cuda")
                loss = schedule.losses(model, x)["loss"]
                opt.zero_grad()
                loss.backward()
                opt.step()
    """,
}


def test_objects_a_factory_returns_as_a_tuple_from_its_own_factories_keep_their_classes(tmp_path: Path) -> None:
    assert lint_tree(tmp_path, PAIR) == ["diff/nets.py:20:TL401"]
    # a place no factory fills (a number) is unknown; the other place still names its class
    files = dict(PAIR)
    files["diff/factory.py"] = PAIR["diff/factory.py"].replace("return net, schedule", "return net, schedule, steps")
    files["train.py"] = PAIR["train.py"].replace("model, schedule = ", "model, schedule, _ = ")
    assert lint_tree(tmp_path, files) == ["diff/nets.py:20:TL401"]


def test_a_tuple_of_this_module_s_classes_from_a_module_with_training_code_keeps_their_classes(tmp_path: Path) -> None:
    # the factory's module is analysed (it names an optimizer): its own classes in the tuple's places
    # are named as other modules find them
    files = {k: v for k, v in PAIR.items() if k != "diff/factory.py"}
    files["diff/nets.py"] = PAIR["diff/nets.py"] + """

        def build_both(width, steps):
            optim_name = "adam"
            return Net(width), Schedule(steps)
    """
    files["train.py"] = PAIR["train.py"].replace("from diff.factory import", "from diff.nets import")
    assert lint_tree(tmp_path, files) == ["diff/nets.py:20:TL401"]


def test_a_factory_returning_tuples_of_different_lengths_names_no_class(tmp_path: Path) -> None:
    files = dict(PAIR)
    files["diff/factory.py"] = PAIR["diff/factory.py"].replace(
        "            return net, schedule", "            if steps > 10:\n                return net, schedule, steps\n            return net, schedule"
    )
    assert lint_tree(tmp_path, files) == []


# FastSpeech 2's shape: `get_model` moves the model it builds (`FastSpeech2(...).to(device)`) and returns
# it with its optimizer when training, alone otherwise; the driver unpacks `model, optimizer`
MOVED = {
    "tts/__init__.py": "",
    "tts/nets.py": """
        import torch
        from torch import nn


        class Regulator(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)

            def forward(self, x, durations):
                for i in range(x.shape[0]):
                    repeat = durations[i].item()
                    x = x + repeat
                return self.fc(x)
    """,
    "tts/build.py": """
        from tts.nets import Regulator


        def get_model(device, restore, train=False):
            model = Regulator().to(device)
            if restore:
                model.load_state_dict(restore)
            if train:
                schedule = [0.1] * 10
                return model, schedule
            model.eval()
            return model
    """,
    "train.py": """
        import torch
        from tts.build import get_model


        def main(loader):
            device = torch.device("cuda")
            model, schedule = get_model(device, None, train=True)
            optimizer = torch.optim.Adam(model.parameters())
            for x, durations in loader:
                out = model(x.to(device), durations.to(device))
                out.mean().backward()
                optimizer.step()
                optimizer.zero_grad()
    """,
}


def test_a_moved_model_a_factory_returns_with_its_optimizer_when_training_keeps_its_class(tmp_path: Path) -> None:
    # a module moved (`.to(device)`, `.cuda()`) gives itself back; the caller unpacking two values took
    # the path returning two. In a module without training code (read by the outline) and in one with
    # it (summarised), moved on the building line or rebound to itself
    assert lint_tree(tmp_path, MOVED) == ["tts/nets.py:13:TL401"]
    analysed = MOVED["tts/build.py"].replace("schedule = [0.1] * 10", "schedule = torch.optim.Adam(model.parameters())")
    analysed = analysed.replace("from tts.nets", "import torch\n        from tts.nets")
    rebound = MOVED["tts/build.py"].replace("model = Regulator().to(device)", "model = Regulator()\n            model = model.cuda()")
    for factory in (analysed, rebound):
        assert lint_tree(tmp_path, {**MOVED, "tts/build.py": factory}) == ["tts/nets.py:13:TL401"], factory
    # a method that is no move (`state_dict()`) gives something else: no class, no forward followed
    other = MOVED["tts/build.py"].replace("model = Regulator().to(device)", "model = Regulator().regulated(device)")
    assert lint_tree(tmp_path, {**MOVED, "tts/build.py": other}) == []


def test_a_class_a_factory_imports_on_each_branch_is_either(tmp_path: Path) -> None:
    # StyleTTS 2's `build_model`: `from Modules.istftnet import Decoder` under one branch of the
    # configuration, `from Modules.hifigan import Decoder` under the other; the object is either class
    other = MOVED["tts/nets.py"].replace("class Regulator", "class OtherRegulator")
    factory = MOVED["tts/build.py"].replace(
        "        from tts.nets import Regulator\n",
        "",
    ).replace(
        "            model = Regulator().to(device)",
        "            if restore == 'other':\n"
        "                from tts.other import OtherRegulator as Regulator\n"
        "            else:\n"
        "                from .nets import Regulator\n"
        "            model = Regulator().to(device)",
    )
    found = lint_tree(tmp_path, {**MOVED, "tts/other.py": other, "tts/build.py": factory})
    assert found == ["tts/nets.py:13:TL401", "tts/other.py:13:TL401"], factory
    # a name imported on one path only and bound to something else on another is not surely a class
    unsure = factory.replace("                from .nets import Regulator", "                Regulator = dict")
    assert lint_tree(tmp_path, {**MOVED, "tts/other.py": other, "tts/build.py": unsure}) == []
    # the factory's module analysed (it builds the optimizer): each call as the imports before it in
    # its function say, not as the function's last import does
    analysed = factory.replace("schedule = [0.1] * 10", "schedule = torch.optim.Adam(model.parameters())").replace(
        "            model = Regulator().to(device)", "                model = Regulator().to(device)").replace(
        "                from tts.other import OtherRegulator as Regulator\n",
        "                from tts.other import OtherRegulator as Regulator\n                model = Regulator().to(device)\n",
    )
    analysed = "\n        import torch\n" + analysed
    found = lint_tree(tmp_path, {**MOVED, "tts/other.py": other, "tts/build.py": analysed})
    assert found == ["tts/nets.py:13:TL401", "tts/other.py:13:TL401"], analysed


def test_a_factory_a_driver_star_imports_hands_on_what_it_builds(tmp_path: Path) -> None:
    # StyleTTS 2's drivers: `from models import *`, then `model = build_model(...)`; the factory's
    # module imports the class inside its body
    factory = MOVED["tts/build.py"].replace("        from tts.nets import Regulator\n", "").replace(
        "            model = Regulator().to(device)", "            from tts.nets import Regulator\n            model = Regulator().to(device)"
    )
    driver = MOVED["train.py"].replace("from tts.build import get_model", "from tts.build import *")
    assert lint_tree(tmp_path, {**MOVED, "tts/build.py": factory, "train.py": driver}) == ["tts/nets.py:13:TL401"]
    # a star import of another module does not make the driver a caller
    unrelated = driver.replace("from tts.build import *", "from tts.nets import *\n        from tts import build\n        get_model = build.make")
    assert lint_tree(tmp_path, {**MOVED, "tts/build.py": factory, "train.py": unrelated}) == []


# A GNN benchmark's shape: the driver builds the net with a factory of another module
# (`gnn_model(name, params)` picking from a dict of per-net factories, or one factory `Gated(params)`)
# and hands it to an epoch function in a third module; the chosen net's `forward` runs every step.
HANDED = {
    "nets/__init__.py": "",
    "nets/load_net.py": GNN_NETS.replace("{TABLE}", '{"Gated": Gated, "Gin": Gin}'),
    "loops/__init__.py": "",
    "loops/train_loop.py": """
        def train_epoch(model, optimizer, loader):
            for x in loader:
                loss = model(x.cuda()).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """,
    "train.py": """
        import torch
        from nets.load_net import gnn_model
        from loops.train_loop import train_epoch


        def main(name, loader):
            model = gnn_model(name, {})
            optimizer = torch.optim.Adam(model.parameters())
            for epoch in range(10):
                train_epoch(model, optimizer, loader)
    """,
}


def test_an_object_a_factory_of_another_module_builds_is_followed_into_the_loop_it_is_handed_to(tmp_path: Path) -> None:
    assert lint_tree(tmp_path, HANDED) == ["nets/load_net.py:8:TL406"]
    files = dict(HANDED)  # the epoch function imported inside the driver, the net moved first
    files["train.py"] = HANDED["train.py"].replace("from loops.train_loop import train_epoch\n", "").replace(
        "            optimizer = ", "            model = model.to(\"cuda\")\n            from loops.train_loop import train_epoch\n            optimizer = ")
    assert lint_tree(tmp_path, files) == ["nets/load_net.py:8:TL406"], files["train.py"]
    files = dict(HANDED)  # one factory of the module, called directly
    files["train.py"] = HANDED["train.py"].replace("gnn_model(name, {})", "Gated({})").replace("import gnn_model", "import Gated")
    assert lint_tree(tmp_path, files) == ["nets/load_net.py:8:TL406"]


def test_a_net_of_a_third_module_built_by_a_factory_is_followed_into_the_loop_it_is_handed_to(tmp_path: Path) -> None:
    # the nets live in their own modules, which only the factory's module imports: the driver that
    # hands the net to the epoch function imports neither
    loader = HANDED["nets/load_net.py"]
    nets, _, factories = loader.partition("    def Gated(params):")
    files = {**HANDED, "nets/gated.py": nets, "nets/load_net.py": "\n    from nets.gated import GatedNet, GinNet\n\n\n    def Gated(params):" + factories}
    assert lint_tree(tmp_path, files) == ["nets/gated.py:8:TL406"]


def test_an_object_a_factory_builds_elsewhere_keeps_the_class_it_builds_and_no_other(tmp_path: Path) -> None:
    # the factory builds the net whose forward builds nothing on the host: no finding
    files = dict(HANDED)
    files["train.py"] = HANDED["train.py"].replace("gnn_model(name, {})", "Gin({})").replace("import gnn_model", "import Gin")
    assert lint_tree(tmp_path, files) == []
    # a factory that returns something else on one path names no class
    files["nets/load_net.py"] = HANDED["nets/load_net.py"].replace("    return GatedNet()", "    return GatedNet() if params else None")
    files["train.py"] = HANDED["train.py"].replace("gnn_model(name, {})", "Gated({})").replace("import gnn_model", "import Gated")
    assert lint_tree(tmp_path, files) == []


# nnU-Net's shape: the trainer builds its loss and hands it to a wrapper class of another module,
# whose constructor keeps it (`self.loss = loss`) and whose `forward` calls it for each output;
# the trainer calls the wrapper every step, so the wrapped loss's `forward` runs every step
HELD = {
    "pkg/__init__.py": "",
    "pkg/losses.py": """
        from torch import nn


        class DiceCE(nn.Module):
            def forward(self, out, target):
                num_fg = (target != 255).sum().item()
                return nn.functional.cross_entropy(out, target) if num_fg > 0 else out.sum() * 0
    """,
    "pkg/wrapper.py": """
        from torch import nn


        class DeepSupervisionWrapper(nn.Module):
            def __init__(self, loss, weight_factors=None):
                super().__init__()
                self.weight_factors = tuple(weight_factors)
                self.loss = loss

            def forward(self, *args):
                weights = self.weight_factors
                return sum([weights[i] * self.loss(*inputs) for i, inputs in enumerate(zip(*args)) if weights[i] != 0.0])
    """,
    "pkg/trainer.py": """
        import torch
        from pkg.losses import DiceCE
        from pkg.wrapper import DeepSupervisionWrapper


        class Trainer:
            def __init__(self, net):
                self.device = torch.device("cuda")
                self.net = net.to(self.device)
                self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.01)
                self.loss = self._build_loss()

            def _build_loss(self):
                loss = DiceCE()
                loss = DeepSupervisionWrapper(loss, [1.0, 0.5])
                return loss

            def train_step(self, batch):
                data = batch["data"].to(self.device)
                target = [t.to(self.device) for t in batch["target"]]
                self.optimizer.zero_grad()
                l = self.loss(self.net(data), target)
                l.backward()
                self.optimizer.step()

            def run(self, loader):
                for epoch in range(10):
                    for batch in loader:
                        self.train_step(batch)
    """,
}


def test_an_object_a_class_of_another_module_holds_runs_where_that_class_calls_it(tmp_path: Path) -> None:
    assert lint_tree(tmp_path, HELD) == ["pkg/losses.py:7:TL401"]


def test_a_held_object_the_holder_never_calls_runs_nowhere(tmp_path: Path) -> None:
    # the wrapper keeps the loss but calls another attribute: nothing of the loss runs every step
    files = {**HELD, "pkg/wrapper.py": HELD["pkg/wrapper.py"].replace("self.loss(*inputs)", "self.other(*inputs)")}
    assert lint_tree(tmp_path, files) == []
    # the constructor rebinds its parameter before keeping it: what it keeps is not the object handed in
    files = {**HELD, "pkg/wrapper.py": HELD["pkg/wrapper.py"].replace("        self.loss = loss", "        loss = nn.Identity()\n                self.loss = loss")}
    assert lint_tree(tmp_path, files) == []


# VQGAN's adaptive weight: a helper of another module takes `autograd.grad(..., retain_graph=True)`
# and returns a number; the step that calls it backpropagates afterwards, consuming the graph
RETAINING = {
    "vqgan.py": """
        import torch


        def calculate_lambda(perceptual_loss, gan_loss, last_layer):
            g1 = torch.autograd.grad(perceptual_loss, last_layer, retain_graph=True)[0]
            g2 = torch.autograd.grad(gan_loss, last_layer, retain_graph=True)[0]
            return torch.clamp(torch.norm(g1) / (torch.norm(g2) + 1e-4), 0, 1e4).detach()
    """,
    "train.py": """
        import torch
        from vqgan import calculate_lambda


        def train(model, disc, loader, opt):
            for x in loader:
                out = model(x.cuda())
                rec, gan = (out - x.cuda()).abs().mean(), -disc(out).mean()
                lam = calculate_lambda(rec, gan, model.last.weight)
                loss = rec + lam * gan
                opt.zero_grad()
                loss.backward()
                opt.step()
    """,
}


def test_a_graph_retained_by_another_module_s_helper_and_consumed_by_the_caller_is_no_finding(tmp_path: Path) -> None:
    assert [f for f in lint_tree(tmp_path, RETAINING) if "TL301" in f] == []


def test_a_graph_retained_by_a_helper_whose_caller_never_backpropagates_after_it_is(tmp_path: Path) -> None:
    # the caller's backward comes before the helper's call: nothing of the step consumes what it keeps
    files = {**RETAINING, "train.py": RETAINING["train.py"].replace(
        "                lam = calculate_lambda(rec, gan, model.last.weight)\n", "").replace(
        "                loss = rec + lam * gan\n", "                loss = rec + gan\n").replace(
        "                opt.step()\n", "                opt.step()\n                calculate_lambda(rec, gan, model.last.weight)\n")}
    assert [f for f in lint_tree(tmp_path, files) if "TL301" in f] == ["vqgan.py:7:TL301"]  # (its first `grad` is followed by its second)


# Retinaface's and ssd.pytorch's MultiBoxLoss: targets built with the legacy `torch.Tensor(num, n, 4)`,
# filled per image by a helper, then moved. On the host unless a script importing the loss makes a
# CUDA type the default (ssd.pytorch's `train.py` does: there the tensor is built on the device).
LEGACY_LOSS = {
    "layers/__init__.py": "",
    "layers/multibox.py": """
        import torch
        from torch import nn


        def match(truths, loc_t, idx):
            loc_t[idx] = truths


        class MultiBoxLoss(nn.Module):
            def forward(self, predictions, targets):
                num, n = predictions.size(0), predictions.size(1)
                loc_t = torch.Tensor(num, n, 4)
                for idx in range(num):
                    match(targets[idx], loc_t, idx)
                loc_t = loc_t.cuda()
                scale = torch.Tensor([0.1, 0.1, 0.2, 0.2]).cuda()
                return ((predictions - loc_t) / scale).abs().sum()
    """,
    "train.py": """
        import torch

        from layers.multibox import MultiBoxLoss

        DEFAULT


        def train(net, loader, optimizer):
            criterion = MultiBoxLoss()
            for images, targets in loader:
                images = images.cuda()
                targets = [t.cuda() for t in targets]
                loss = criterion(net(images), targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """,
}


def _legacy_loss(default: str) -> dict[str, str]:
    return {**LEGACY_LOSS, "train.py": LEGACY_LOSS["train.py"].replace("DEFAULT", default)}


def test_the_default_tensor_type_s_constructor_builds_on_the_host_and_is_moved_every_step(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, _legacy_loss("torch.manual_seed(0)"), ["layers/multibox.py"])
    assert [f for f in found if f.endswith("TL406")] == ["layers/multibox.py:16:TL406", "layers/multibox.py:17:TL406"]


def test_a_cpu_default_set_by_the_script_changes_nothing(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, _legacy_loss('torch.set_default_tensor_type("torch.DoubleTensor" if False else "torch.cpu.FloatTensor")'), ["layers/multibox.py"])
    assert [f for f in found if f.endswith("TL406")] == ["layers/multibox.py:16:TL406", "layers/multibox.py:17:TL406"]


def test_a_cuda_default_set_by_a_script_importing_the_loss_builds_it_on_the_device(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, _legacy_loss('torch.set_default_tensor_type("torch.cuda.FloatTensor")'), ["layers/multibox.py"])
    assert [f for f in found if f.endswith("TL406")] == []


def test_a_parameter_wrapping_a_kept_host_table_is_the_table_moved_every_step() -> None:
    source = """
        import torch
        from torch import nn


        class PositionalEncoding(nn.Module):
            def __init__(self, n, d):
                super().__init__()
                self.pe = torch.zeros(n, d)
                self.register_buffer("table", torch.zeros(n, d))

            def forward(self, x):
                out = x + nn.Parameter(self.pe, requires_grad=False).to(x.device)
                return out + nn.Parameter(self.table, requires_grad=False).to(x.device)


        def train(model, loader, opt):
            model = model.cuda()
            for x in loader:
                loss = model(x.cuda()).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()


        train(PositionalEncoding(512, 64), [], None)
    """
    assert lines(source, "TL406") == [13]  # not the registered buffer, which moves with the module
