"""Calls the step makes indirectly (DESIGN.md, "The whole program"): a function handed to another
that calls it, a method of an object whose class the project chooses at run time (a dict of
classes, a registry, a declared base: class-hierarchy analysis over the project's own classes),
and an in-project framework whose base class dispatches to a subclass's override."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import lint
from tests.test_whole_program import findings, write

# -- 1. a function handed to another and called there ----------------------------------------------

TIMING = """
    import time

    import torch


    def timer(fn, *args):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn(*args)
        torch.cuda.synchronize()
        return time.perf_counter() - start, out


    def every(fn, step, interval=100):
        if step % interval == 0:
            fn()
"""

TIMED_TRAIN = """
    import functools

    import torch
    import torch.nn.functional as F

    from utils.timing import every, timer


    def train_step(model, optimizer, batch):
        x, y = batch
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss


    def plain_step(model, optimizer, batch):
        return train_step(model, optimizer, batch)


    def logged_step(model, optimizer, batch):
        loss = train_step(model, optimizer, batch)
        print(f"loss {loss.item():.4f}")
        return loss


    def report(model):
        print(f"weight norm {model.weight.norm().item():.3f}")


    def main(cfg, model, loader):
        model = model.cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        engine = logged_step if cfg.verbose else plain_step
        for step, (x, y) in enumerate(loader):
            batch = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            elapsed, loss = timer(engine, model, optimizer, batch)
            every(functools.partial(report, model), step)
"""


def test_a_step_handed_to_a_timer_of_another_module_runs_every_step_and_so_do_its_syncs(tmp_path: Path) -> None:
    write(tmp_path, {"utils/__init__.py": "", "utils/timing.py": TIMING, "train.py": TIMED_TRAIN})
    found = findings(tmp_path, ["train.py", "utils/timing.py"], "TL40")
    # the timer's two synchronisations, reached from the step loop's `timer(...)` call
    assert found["utils/timing.py:8:TL402"] == [[("train.py", 39)]]
    assert found["utils/timing.py:11:TL402"] == [[("train.py", 39)]]
    # both functions `engine` may hold run every step: the logging one's read is reported
    assert found["train.py:25:TL401"] == [[("train.py", 39)]]


def test_a_function_a_helper_calls_only_on_log_steps_is_not_per_step(tmp_path: Path) -> None:
    write(tmp_path, {"utils/__init__.py": "", "utils/timing.py": TIMING, "train.py": TIMED_TRAIN})
    found = findings(tmp_path, ["train.py", "utils/timing.py"], "TL40")
    # `every(fn, step)` calls `fn` under `if step % interval == 0`: `report` is no per-step code
    assert not any(key.startswith("train.py:30:") for key in found)
    assert "train.py:40:TL401" not in found  # (nor is the call handing it a function a read)


def test_a_function_value_chosen_by_an_option_and_called_in_the_loop_runs_each_candidate() -> None:
    code = """
    import torch

    model = torch.nn.Linear(8, 2).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)


    def schedule_a(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss


    def schedule_b(x, y):
        loss = torch.nn.functional.l1_loss(model(x), y)
        loss.backward()
        print(loss.item())
        return loss


    def unused(x, y):
        print(model(x).sum().item())


    def train(cfg, loader):
        engine = schedule_a if cfg.a else schedule_b
        for x, y in loader:
            engine(x.cuda(), y.cuda())
            opt.step()
            opt.zero_grad()
    """
    found = {d.line: [[loc.line for loc in c] for c in d.chains] for d in lint(code, "TL401")}
    assert found == {17: [[28]]}


# -- 2. an object whose class the project chooses at run time --------------------------------------

CRITERIA = """
    import torch
    import torch.nn as nn


    class Criterion(nn.Module):
        def forward(self, outputs, targets):
            raise NotImplementedError


    class SetCriterion(Criterion):
        def forward(self, outputs, targets):
            loss = (outputs - targets).abs().mean()
            num_boxes = loss.detach().item()
            return loss / max(num_boxes, 1.0)


    class FocalCriterion(Criterion):
        def forward(self, outputs, targets):
            p = outputs.sigmoid()
            return ((1 - p) ** 2 * (p - targets).abs()).mean()


    class HungarianMatcher(nn.Module):
        def forward(self, outputs, targets):
            cost = torch.cdist(outputs, targets)
            return cost.argmin(-1).tolist()


    CRITERIA = {"set": SetCriterion, "focal": FocalCriterion}
"""

CHOSEN_TRAIN = """
    import argparse

    import torch

    from models.criterion import CRITERIA


    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--loss", default="set")
        cfg = parser.parse_args()
        model = torch.nn.Linear(16, 4).cuda()
        criterion = CRITERIA[cfg.loss]()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for x, y in torch.utils.data.DataLoader(cfg.dataset, batch_size=8):
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def _chosen_project(tmp_path: Path, criteria: str = CRITERIA, train: str = CHOSEN_TRAIN) -> dict[str, list]:
    write(tmp_path, {"models/__init__.py": "", "models/criterion.py": criteria, "train.py": train})
    return findings(tmp_path, ["train.py", "models/criterion.py"], "TL401")


def test_a_loss_built_from_a_dict_of_classes_runs_each_candidate_s_forward(tmp_path: Path) -> None:
    found = _chosen_project(tmp_path)
    assert found == {"models/criterion.py:14:TL401": [[("train.py", 18)]]}


def test_the_chain_says_which_class_the_object_may_be(tmp_path: Path) -> None:
    write(tmp_path, {"models/__init__.py": "", "models/criterion.py": CRITERIA, "train.py": CHOSEN_TRAIN})
    settings_path = tmp_path / "models" / "criterion.py"
    from trainlint.config import Settings
    from trainlint.engine.lint import lint_paths

    [result] = lint_paths([(settings_path, Settings(select=("TL401",), root=tmp_path))], jobs=1)
    [diagnostic] = result.diagnostics
    [[place]] = diagnostic.chains
    assert place.note == "`criterion` may be `SetCriterion`, built from the configuration"
    assert "(`criterion` may be `SetCriterion`, built from the configuration)" in diagnostic.chain_dict(diagnostic.chains[0])["message"]


def test_a_class_that_is_not_in_the_dict_is_no_candidate(tmp_path: Path) -> None:
    # `HungarianMatcher.forward` reads on the host too, but the dict cannot build it
    found = _chosen_project(tmp_path, CRITERIA.replace(".tolist()", ".item()"))
    assert list(found) == ["models/criterion.py:14:TL401"]


def test_more_than_three_candidates_say_nothing(tmp_path: Path) -> None:
    more = CRITERIA.replace(
        'CRITERIA = {"set": SetCriterion, "focal": FocalCriterion}',
        """class DiceCriterion(Criterion):
        def forward(self, outputs, targets):
            return 1 - (2 * (outputs * targets).sum() + 1) / (outputs.sum() + targets.sum() + 1)


    class L1Criterion(Criterion):
        def forward(self, outputs, targets):
            return (outputs - targets).abs().mean()


    CRITERIA = {"set": SetCriterion, "focal": FocalCriterion, "dice": DiceCriterion, "l1": L1Criterion}""",
    )
    assert _chosen_project(tmp_path, more) == {}


REGISTRY = """
    class Registry:
        def __init__(self, name):
            self.name = name
            self._classes = {}

        def register(self, name=None):
            def wrap(cls):
                self._classes[name or cls.__name__] = cls
                return cls
            return wrap

        def get(self, name):
            return self._classes[name]


    LOSSES = Registry("losses")
"""

REGISTERED = """
    import torch
    import torch.nn as nn

    from models.registry import LOSSES


    @LOSSES.register("set")
    class SetCriterion(nn.Module):
        def forward(self, outputs, targets):
            loss = (outputs - targets).abs().mean()
            num_boxes = loss.detach().item()
            return loss / max(num_boxes, 1.0)


    class HungarianMatcher(nn.Module):
        def forward(self, outputs, targets):
            cost = torch.cdist(outputs, targets)
            return cost.argmin(-1).item()
"""

REGISTRY_TRAIN = """
    import torch

    from models.registry import LOSSES


    def train(cfg, model, loader):
        model.cuda()
        criterion = LOSSES.get(cfg.loss)()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_a_loss_a_registry_builds_from_a_configuration_string_runs_the_registered_classes(tmp_path: Path) -> None:
    # registered in a module the training script never imports; the unregistered matcher is no candidate
    files = {"models/__init__.py": "", "models/registry.py": REGISTRY, "models/losses.py": REGISTERED, "train.py": REGISTRY_TRAIN}
    write(tmp_path, files)
    found = findings(tmp_path, ["train.py", "models/losses.py"], "TL401")
    assert found == {"models/losses.py:12:TL401": [[("train.py", 13)]]}


DECLARED_TRAIN = """
    import torch
    from hydra.utils import instantiate

    from models.criterion import Criterion


    def train(cfg, model, loader):
        model.cuda()
        criterion: Criterion = instantiate(cfg.criterion)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_an_object_declared_as_a_project_base_may_be_any_of_its_subclasses_but_no_other(tmp_path: Path) -> None:
    # `HungarianMatcher` defines `forward` too, but it is no `Criterion`
    found = _chosen_project(tmp_path, CRITERIA.replace(".tolist()", ".item()"), DECLARED_TRAIN)
    assert found == {"models/criterion.py:14:TL401": [[("train.py", 14)]]}


# -- 3. an in-project framework: a base class's loop, a subclass's override -------------------------

POLICY_BASE = """
    from dataclasses import dataclass

    import torch


    @dataclass
    class Stats:
        loss: float
        grad_norm: float


    class BasePolicy(torch.nn.Module):
        def __init__(self, net, optim):
            super().__init__()
            self.net = net
            self.optim = optim

        def update(self, batch):
            self.train()
            return self._update_with_batch(batch)

        def _update_with_batch(self, batch):
            raise NotImplementedError
"""

POLICY_PG = """
    import torch

    from rl.policy.base import BasePolicy, Stats


    class PGPolicy(BasePolicy):
        def _update_with_batch(self, batch):
            obs, act, ret = batch
            dist = torch.distributions.Categorical(logits=self.net(obs))
            loss = -(dist.log_prob(act) * ret).mean()
            self.optim.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
            self.optim.step()
            return Stats(loss=loss.item(), grad_norm=norm.item())


    class A2CPolicy(BasePolicy):
        def _update_with_batch(self, batch):
            obs, act, ret = batch
            loss = (self.net(obs).squeeze(-1) - ret).pow(2).mean()
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
            return Stats(loss=loss.item(), grad_norm=0.0)
"""

TRAINER = """
    class Trainer:
        def __init__(self, policy, collector, max_epoch, device="cuda"):
            self.policy = policy
            self.collector = collector
            self.max_epoch = max_epoch
            self.device = device

        def run(self):
            for epoch in range(self.max_epoch):
                for batch in self.collector.collect():
                    batch = [b.to(self.device) for b in batch]
                    stats = self.policy.update(batch)
                    self.log(stats)

        def log(self, stats):
            print(stats)
"""

RL_MAIN = """
    import torch

    from rl.collector import Collector
    from rl.policy.pg import PGPolicy
    from rl.trainer.base import Trainer


    def main():
        net = torch.nn.Linear(4, 2).cuda()
        optim = torch.optim.Adam(net.parameters(), lr=1e-3)
        policy = PGPolicy(net, optim)
        Trainer(policy, Collector(), max_epoch=10).run()


    if __name__ == "__main__":
        main()
"""

COLLECTOR = """
    class Collector:
        def __init__(self, env=None):
            self.env = env

        def collect(self):
            yield from self.env.rollouts()
"""


def _framework(tmp_path: Path, main: str = RL_MAIN, policies: str = "") -> dict[str, list]:
    files = {
        "rl/__init__.py": "", "rl/policy/__init__.py": policies, "rl/trainer/__init__.py": "",
        "rl/policy/base.py": POLICY_BASE, "rl/policy/pg.py": POLICY_PG, "rl/trainer/base.py": TRAINER,
        "rl/collector.py": COLLECTOR, "main.py": main,
    }
    write(tmp_path, files)
    return findings(tmp_path, ["rl/policy/pg.py", "rl/policy/base.py"], "TL401")


def test_a_trainer_base_s_loop_runs_the_override_its_policy_dispatches_to(tmp_path: Path) -> None:
    # `Trainer.run` → `BasePolicy.update` (inherited by the `PGPolicy` main.py hands it) →
    # `self._update_with_batch`, `PGPolicy`'s: its `loss.item()` in the returned stats is a per-step sync
    found = _framework(tmp_path)
    assert found == {"rl/policy/pg.py:16:TL401": [[("base.py", 13), ("base.py", 21)]]}


def test_a_subclass_the_project_never_builds_runs_no_override(tmp_path: Path) -> None:
    # `A2CPolicy` overrides `_update_with_batch` too, but nothing builds one
    found = _framework(tmp_path)
    assert not any(key.startswith("rl/policy/pg.py:26:") for key in found)
    # built by the script, it runs as well
    built = _framework(tmp_path, RL_MAIN.replace("from rl.policy.pg import PGPolicy", "from rl.policy.pg import A2CPolicy, PGPolicy")
                       .replace("policy = PGPolicy(net, optim)", "policy = PGPolicy(net, optim) if net.out_features > 1 else A2CPolicy(net, optim)"))
    assert "rl/policy/pg.py:26:TL401" in built


def test_a_subclass_its_package_offers_is_built_by_the_package_s_users(tmp_path: Path) -> None:
    # mimicry's `nets/wgan_gp/__init__.py` is `from .wgan_gp_base import *`: a library offers its
    # classes to users who build them, though its own example builds another one
    assert "rl/policy/pg.py:26:TL401" in _framework(tmp_path, policies="from .pg import *\n")
    assert "rl/policy/pg.py:26:TL401" not in _framework(tmp_path, policies="from .pg import PGPolicy\n")  # (offers one, not the other)


POLICY_AC = """
    import torch

    from rl.policy.base import BasePolicy, Stats


    class ActorCriticPolicy(BasePolicy):
        def _update_with_batch(self, batch):
            obs, act, ret = batch
            loss = (self.net(obs).squeeze(-1) - ret).pow(2).mean()
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
            return Stats(loss=loss.item(), grad_norm=0.0)


    class A2CPolicy(ActorCriticPolicy):
        pass
"""


def test_an_intermediate_base_runs_its_override_in_the_subclass_the_project_builds(tmp_path: Path) -> None:
    # nothing builds `ActorCriticPolicy` itself, but main.py builds its subclass `A2CPolicy`, which
    # runs the override it inherits; built by nobody, neither runs it
    write(tmp_path, {"rl/policy/ac.py": POLICY_AC})
    main = RL_MAIN.replace("from rl.policy.pg import PGPolicy", "from rl.policy.ac import A2CPolicy\n    from rl.policy.pg import PGPolicy")
    built = _framework(tmp_path, main.replace("policy = PGPolicy(net, optim)", "policy = PGPolicy(net, optim) if net.out_features > 1 else A2CPolicy(net, optim)"))
    assert "rl/policy/ac.py:14:TL401" in findings(tmp_path, ["rl/policy/ac.py"], "TL401")
    assert built
    write(tmp_path, {"main.py": RL_MAIN})
    assert findings(tmp_path, ["rl/policy/ac.py"], "TL401") == {}


# -- 4. an object built under the script guard and handed to the step's module ---------------------

# a YOLO-style project: train.py builds the loss under `if __name__ == "__main__":` and hands it to
# the epoch function of another module, whose step loop calls it; the loss moves host tensors
GUARDED = {
    "nets/__init__.py": "",
    "nets/loss.py": """
        import torch
        import torch.nn as nn


        class YOLOLoss(nn.Module):
            def __init__(self, cuda=True):
                super().__init__()
                self.cuda = cuda

            def forward(self, x, targets):
                y_true = torch.zeros(4, 5)
                if self.cuda:
                    y_true = y_true.type_as(x)
                return ((x - y_true) ** 2).sum()
    """,
    "utils/__init__.py": "",
    "utils/fit.py": """
        def fit_one_epoch(model, yolo_loss, optimizer, batches):
            for images, targets in batches:
                optimizer.zero_grad()
                outputs = model(images)
                loss = 0
                for level in range(len(outputs)):
                    loss += yolo_loss(outputs[level], targets)
                loss.backward()
                optimizer.step()
    """,
    "train.py": """
        import torch
        from nets.loss import YOLOLoss
        from utils.fit import fit_one_epoch

        if __name__ == "__main__":
            model = torch.nn.Linear(4, 5).cuda()
            yolo_loss = YOLOLoss(True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                fit_one_epoch(model, yolo_loss, optimizer, [])
    """,
}


def test_an_object_built_under_the_script_guard_and_handed_on_runs_every_step(tmp_path: Path) -> None:
    write(tmp_path, GUARDED)
    assert findings(tmp_path, ["nets/loss.py"], "TL406") == {"nets/loss.py:14:TL406": [[("fit.py", 8)]]}


def test_a_name_rebound_after_the_call_hands_on_only_what_reached_it(tmp_path: Path) -> None:
    # the loss is handed on before it is built (`yolo_loss` is still a string there): no step runs it
    files = dict(GUARDED)
    files["train.py"] = GUARDED["train.py"].replace(
        "            yolo_loss = YOLOLoss(True)\n", "            yolo_loss = 'mse'\n"
    ).replace(
        "                fit_one_epoch(model, yolo_loss, optimizer, [])",
        "                fit_one_epoch(model, yolo_loss, optimizer, [])\n            yolo_loss = YOLOLoss(True)",
    )
    write(tmp_path, files)
    assert findings(tmp_path, ["nets/loss.py"], "TL406") == {}


# -- 5. `super().m(...)` running a base class's method of another module ----------------------------

SPACED = {
    "diffusion/__init__.py": "",
    "diffusion/gaussian.py": """
        import torch


        class GaussianDiffusion:
            def training_losses(self, model, x, t):
                scale = torch.exp(torch.arange(0, 8, dtype=torch.float32)).to(x.device)
                noise = torch.randn_like(x)
                return ((model(x * scale + noise, t) - noise) ** 2).mean()

            def sample(self, model, x, t):
                table = torch.arange(0, 8, dtype=torch.float32).to(x.device)
                return model(x * table, t)
    """,
    "diffusion/respace.py": """
        from .gaussian import GaussianDiffusion


        class SpacedDiffusion(GaussianDiffusion):
            def training_losses(self, model, *args, **kwargs):
                return super().training_losses(model, *args, **kwargs)

            def sample(self, model, *args, **kwargs):
                return super().sample(model, *args, **kwargs)
    """,
    "train.py": """
        import torch
        from diffusion.respace import SpacedDiffusion


        def main(loader):
            model = torch.nn.Linear(8, 8).cuda()
            diffusion = SpacedDiffusion()
            opt = torch.optim.AdamW(model.parameters())
            for x, t in loader:
                loss = diffusion.training_losses(model, x.cuda(), t)
                opt.zero_grad()
                loss.backward()
                opt.step()
    """,
}


def test_super_runs_the_base_method_of_another_module_every_step(tmp_path: Path) -> None:
    # the subclass's override runs every step and hands on to its base's through `super()`; the
    # base's `sample`, reached only through the override nobody calls in the loop, is not per step
    write(tmp_path, SPACED)
    assert findings(tmp_path, ["diffusion/gaussian.py"], "TL406") == {
        "diffusion/gaussian.py:7:TL406": [[("train.py", 11), ("respace.py", 7)]]
    }


# -- 6. a model handed to a method of another module's object ---------------------------------------

HANDED_TO_METHOD = {
    "models.py": """
        import math

        import torch
        import torch.nn as nn


        class DiT(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(8, 8)

            def forward(self, x, t):
                half = 4
                freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half).to(t.device)
                return self.lin(x) + (t[:, None] * freqs[None]).sum()
    """,
    "diffusion/__init__.py": "",
    "diffusion/gaussian.py": """
        import torch


        class GaussianDiffusion:
            def training_losses(self, model, x, t):
                noise = torch.randn_like(x)
                return ((model(x + noise, t) - noise) ** 2).mean()

            def sample(self, model, x, t):
                return model(x, t)
    """,
    "train.py": """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        from diffusion.gaussian import GaussianDiffusion
        from models import DiT


        def main(loader):
            device = torch.device("cuda")
            model = DDP(DiT().to(device), device_ids=[0])
            diffusion = GaussianDiffusion()
            opt = torch.optim.AdamW(model.parameters())
            for step, (x, t) in enumerate(loader):
                loss = diffusion.training_losses(model, x.to(device), t.to(device))
                opt.zero_grad()
                loss.backward()
                opt.step()
    """,
}


def test_a_model_handed_to_a_method_of_an_object_runs_its_forward_every_step(tmp_path: Path) -> None:
    write(tmp_path, HANDED_TO_METHOD)
    expected = {"models.py:15:TL406": [[("train.py", 15), ("gaussian.py", 8)]]}
    assert findings(tmp_path, ["models.py"], "TL406") == expected
    # read as the summaries of a whole run read it (the object's module analysed for another file)
    assert findings(tmp_path, ["models.py", "diffusion/gaussian.py", "train.py"], "TL406") == expected


def test_a_model_handed_only_to_a_gated_sampling_method_is_not_run_every_step(tmp_path: Path) -> None:
    files = dict(HANDED_TO_METHOD)
    files["train.py"] = HANDED_TO_METHOD["train.py"].replace(
        "                loss = diffusion.training_losses(model, x.to(device), t.to(device))",
        "                loss = ((model.module.lin(x.to(device))) ** 2).mean()\n"
        "                if step % 1000 == 0:\n"
        "                    diffusion.sample(model, x.to(device), t.to(device))",
    )
    write(tmp_path, files)
    assert findings(tmp_path, ["models.py"], "TL406") == {}


def test_a_model_a_dict_of_factories_builds_is_each_factory_s_class(tmp_path: Path) -> None:
    # `DiT_models[args.model]()`: a dict of functions each returning a `DiT`, then wrapped in DDP
    files = dict(HANDED_TO_METHOD)
    files["models.py"] = HANDED_TO_METHOD["models.py"] + """

        def DiT_S(**kwargs):
            return DiT(**kwargs)


        def DiT_B(**kwargs):
            return DiT(**kwargs)


        DiT_models = {"DiT-S": DiT_S, "DiT-B": DiT_B}
    """
    files["train.py"] = HANDED_TO_METHOD["train.py"].replace("from models import DiT", "from models import DiT_models").replace(
        "model = DDP(DiT().to(device), device_ids=[0])", "model = DiT_models[name]()\n            model = DDP(model.to(device), device_ids=[0])"
    ).replace("def main(loader):", "def main(loader, name):")
    write(tmp_path, files)
    assert list(findings(tmp_path, ["models.py"], "TL406")) == ["models.py:15:TL406"]


def test_a_dict_holding_a_factory_of_something_else_names_no_class(tmp_path: Path) -> None:
    files = dict(HANDED_TO_METHOD)
    files["models.py"] = HANDED_TO_METHOD["models.py"] + """

        def DiT_S(**kwargs):
            return DiT(**kwargs) if kwargs else None


        DiT_models = {"DiT-S": DiT_S}
    """
    files["train.py"] = HANDED_TO_METHOD["train.py"].replace("from models import DiT", "from models import DiT_models").replace(
        "model = DDP(DiT().to(device), device_ids=[0])", "model = DDP(DiT_models[name]().to(device), device_ids=[0])"
    ).replace("def main(loader):", "def main(loader, name):")
    write(tmp_path, files)
    assert findings(tmp_path, ["models.py"], "TL406") == {}


def test_a_model_a_module_s_own_names_pick_is_each_factory_s_class(tmp_path: Path) -> None:
    # `models.__dict__[args.model](...)` (MAE's, MAR's): the module's factories, each binding then
    # returning a `DiT`, handed to the epoch function of another module
    files = dict(HANDED_TO_METHOD)
    files["models.py"] = HANDED_TO_METHOD["models.py"] + """

        def dit_small(**kwargs):
            model = DiT(**kwargs)
            return model
    """
    files["train.py"] = HANDED_TO_METHOD["train.py"].replace("from models import DiT", "import models").replace(
        "model = DDP(DiT().to(device), device_ids=[0])", "model = models.__dict__[name]()\n            model = DDP(model.to(device), device_ids=[0])"
    ).replace("def main(loader):", "def main(loader, name):")
    write(tmp_path, files)
    assert list(findings(tmp_path, ["models.py"], "TL406")) == ["models.py:15:TL406"]


def test_a_factory_returning_different_things_names_no_class_from_a_module_s_names(tmp_path: Path) -> None:
    files = dict(HANDED_TO_METHOD)
    files["models.py"] = HANDED_TO_METHOD["models.py"] + """

        def dit_small(pretrained=False):
            model = DiT()
            if pretrained:
                model = load(model)
            return model
    """
    files["train.py"] = HANDED_TO_METHOD["train.py"].replace("from models import DiT", "import models").replace(
        "model = DDP(DiT().to(device), device_ids=[0])", "model = DDP(models.__dict__[name]().to(device), device_ids=[0])"
    ).replace("def main(loader):", "def main(loader, name):")
    write(tmp_path, files)
    assert findings(tmp_path, ["models.py"], "TL406") == {}


# -- a dict of functions, picked by a configuration string and called in the step -------------------
LOSS_TABLE = {
    "models.py": HANDED_TO_METHOD["models.py"],
    "losses.py": """
        def noise_loss(model, x, t):
            return ((model(x, t.float()) - x) ** 2).mean()


        def l1_loss(model, x, t):
            return (model(x, t.float()) - x).abs().mean()


        loss_registry = {"simple": noise_loss, "l1": l1_loss}
    """,
    "runner.py": """
        import torch

        from losses import loss_registry
        from models import DiT


        class Runner:
            def __init__(self, config):
                self.config = config

            def train(self, loader):
                model = DiT().to("cuda")
                model = torch.nn.DataParallel(model)
                optimizer = torch.optim.Adam(model.parameters())
                for x, t in loader:
                    loss = loss_registry[self.config.loss](model, x.to("cuda"), t.to("cuda"))
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
    """,
}


def test_a_function_a_dict_of_another_module_holds_runs_every_step_with_the_model_handed_to_it(tmp_path: Path) -> None:
    # ddim's `loss_registry[config.model.type](model, x, t, e, b)`, in a method of its runner
    write(tmp_path, LOSS_TABLE)
    assert list(findings(tmp_path, ["models.py"], "TL406")) == ["models.py:15:TL406"]
    assert findings(tmp_path, ["models.py", "losses.py", "runner.py"], "TL406") == findings(tmp_path, ["models.py"], "TL406")


def test_a_dict_of_many_functions_or_of_other_things_runs_none_of_them(tmp_path: Path) -> None:
    many = dict(LOSS_TABLE)
    many["losses.py"] = LOSS_TABLE["losses.py"].replace(
        'loss_registry = {"simple": noise_loss, "l1": l1_loss}',
        'def l2_loss(model, x, t):\n            return l1_loss(model, x, t) ** 2\n\n\n'
        '        def huber_loss(model, x, t):\n            return l1_loss(model, x, t)\n\n\n'
        '        loss_registry = {"a": noise_loss, "b": l1_loss, "c": l2_loss, "d": huber_loss}',
    )
    write(tmp_path, many)
    compile((tmp_path / "losses.py").read_text(), "losses.py", "exec")
    assert findings(tmp_path, ["models.py"], "TL406") == {}
    mixed = dict(LOSS_TABLE)
    mixed["losses.py"] = LOSS_TABLE["losses.py"].replace('"l1": l1_loss}', '"l1": l1_loss, "mse": torch.nn.MSELoss}')
    write(tmp_path, mixed)
    assert findings(tmp_path, ["models.py"], "TL406") == {}


HEADS_TRAIN = """
    import torch
    import torch.nn as nn


    class ArcHead(nn.Module):
        def forward(self, x, labels):
            one_hot = torch.zeros(x.size()).cuda()
            return x * one_hot


    class CosHead(ArcHead):
        pass


    class SphereHead(ArcHead):
        pass


    class SoftmaxHead(ArcHead):
        pass


    def main(cfg, backbone, loader, optimizer):
        heads = {"arc": ArcHead(), "cos": CosHead(), "sphere": SphereHead()}
        head = heads[cfg.head].cuda()
        for x, y in loader:
            loss = head(backbone(x.cuda()), y.cuda()).sum()
            loss.backward()
            optimizer.step()
"""


def test_a_dict_of_objects_chosen_by_a_key_runs_the_forward_of_at_most_three_classes() -> None:
    """A dict of instances subscripted by an option is one object whose class the project chooses at
    run time: followed among three candidates, as a registry's, not among four (face.evoLVe's heads)."""
    import textwrap

    code = textwrap.dedent(HEADS_TRAIN)
    assert [d.line for d in lint(code, "TL406")] == [8]
    four = code.replace('"sphere": SphereHead()}', '"sphere": SphereHead(), "softmax": SoftmaxHead()}')
    assert lint(four, "TL406") == []
    # (a key written out picks one object: the four-class dict does not hide it)
    fixed = four.replace("heads[cfg.head]", "ArcHead()")
    assert [d.line for d in lint(fixed, "TL406")] == [8]


def test_a_local_dict_of_functions_called_in_the_loop_runs_what_it_holds() -> None:
    code = """
        import torch


        def noise_loss(model, x):
            offsets = torch.arange(8).to(x.device)
            return (model(x) + offsets).mean()


        LOSSES = {"simple": noise_loss}


        def main(config, model, loader, optimizer):
            model = model.cuda()
            for x in loader:
                loss = LOSSES[config.loss](model, x.cuda())
                loss.backward()
                optimizer.step()
    """
    import textwrap

    assert [d.line for d in lint(textwrap.dedent(code), "TL406")] == [6]
    assert lint(textwrap.dedent(code).replace("LOSSES[config.loss](model, x.cuda())", "(model(x.cuda())).mean()"), "TL406") == []


# -- a `functools.partial` of a method, called every step --------------------------------------------

DIFFUSION = """
    import torch


    class Diffusion:
        def training_losses(self, model, x):
            torch.cuda.synchronize()
            return model(x).mean()
"""

PARTIAL_TRAIN = """
    import functools

    from diffusion import Diffusion

    diffusion = Diffusion()


    def fit(model, loader, opt):
        for x in loader:
            compute = functools.partial(diffusion.training_losses, model, x.cuda())
            loss = compute()
            loss.backward()
            opt.step()
            opt.zero_grad()
"""


def test_a_partial_of_a_method_called_every_step_runs_the_method_every_step(tmp_path: Path) -> None:
    # guided-diffusion's `compute_losses = functools.partial(self.diffusion.training_losses, model, x)`,
    # then `compute_losses()`; near miss: the partial is only built in the loop, and called after it
    files = ["diffusion.py", "train.py"]
    for folder in ("p", "q"):
        (tmp_path / folder).mkdir()
    write(tmp_path / "p", {"diffusion.py": DIFFUSION, "train.py": PARTIAL_TRAIN})
    assert findings(tmp_path / "p", files, "TL402") == {"diffusion.py:7:TL402": [[("train.py", 12)]]}
    after = PARTIAL_TRAIN.replace("loss = compute()", "loss = model(x.cuda()).mean()") + "        compute()\n"
    write(tmp_path / "q", {"diffusion.py": DIFFUSION, "train.py": after})
    assert findings(tmp_path / "q", files, "TL402") == {}



GNN_NETS = """
    import torch
    import torch.nn as nn


    class GatedNet(nn.Module):
        def forward(self, x):
            e = torch.ones(x.size(0), 1).to(x.device)
            return x * e


    class GinNet(nn.Module):
        def forward(self, x):
            return x


    def Gated(params):
        return GatedNet()


    def Gin(params):
        return GinNet()


    def gnn_model(name, params):
        models = {TABLE}
        return models[name](params)
"""

LOCAL_TABLE = GNN_NETS + """

    def main(name):
        model = gnn_model(name, {}).cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for x in loader:
            loss = model.forward(x.cuda()).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


@pytest.mark.parametrize("table, found", [
    ('{"Gated": Gated, "Gin": Gin}', ["train.py:8:TL406"]),  # factories of this module, each building one class
    ('{"Gated": lambda p: GatedNet(), "Gin": Gin}', []),  # a lambda: not a factory this analysis reads
])
def test_a_dict_bound_in_the_factory_that_subscripts_it_chooses_among_what_its_values_build(tmp_path: Path, table, found) -> None:
    write(tmp_path, {"train.py": LOCAL_TABLE.replace("{TABLE}", table)})
    assert list(findings(tmp_path, ["train.py"], "TL406")) == found


def test_a_factory_of_another_module_choosing_from_its_own_dict_builds_one_of_its_entries(tmp_path: Path) -> None:
    nets, main = LOCAL_TABLE.replace("{TABLE}", '{"Gated": Gated, "Gin": Gin}').split("    def main(name):")
    train = "    import torch\n    from nets.load_net import gnn_model\n\n\n    def main(name):" + main
    write(tmp_path, {"nets/__init__.py": "", "nets/load_net.py": nets, "train.py": train})
    assert list(findings(tmp_path, ["train.py", "nets/load_net.py"], "TL406")) == ["nets/load_net.py:8:TL406"]
    # an entry that is no class or factory of the module: nothing is known of what the dict builds
    write(tmp_path, {"nets/load_net.py": nets.replace('"Gin": Gin}', '"Gin": make_gin}')})
    assert list(findings(tmp_path, ["train.py", "nets/load_net.py"], "TL406")) == []


# -- an object known only by the method called on it ------------------------------------------------

# mimicry's GANs: the trainer builds a `MetricLog` and hands it to `netG.train_step(..., log_data=...)`,
# `netG` being whatever model the user gave the trainer; `train_step` logs the device loss through it
DUCK = {
    "gan/__init__.py": "",
    "gan/metric_log.py": """
        import torch


        class MetricLog:
            def __init__(self):
                self.metrics = {}

            def add_metric(self, name, value):
                if isinstance(value, torch.Tensor):
                    value = value.item()
                self.metrics[name] = value
    """,
    "gan/nets.py": """
        import torch.nn as nn


        class Generator(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = nn.Linear(8, 8)

            def train_step(self, batch, opt, log_data, device):
                loss = self.net(batch.to(device)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                log_data.add_metric("loss", loss)
    """,
    "gan/trainer.py": """
        from gan.metric_log import MetricLog


        class Trainer:
            def __init__(self, net, opt, loader):
                self.net, self.opt, self.loader = net, opt, loader

            def train(self):
                for batch in self.loader:
                    log_data = MetricLog()
                    self.net.train_step(batch, self.opt, log_data, "cuda")
    """,
}


def test_a_parameter_known_only_by_its_method_is_the_one_project_class_that_defines_it(tmp_path: Path) -> None:
    write(tmp_path, DUCK)
    found = findings(tmp_path, ["gan/nets.py"], "TL401")
    assert list(found) == ["gan/nets.py:15:TL401"]


def test_a_method_no_class_the_project_builds_defines_says_nothing_of_the_parameter(tmp_path: Path) -> None:
    # near miss: the trainer hands over a plain dict's wrapper of a library; `MetricLog` is never built
    write(tmp_path, {**DUCK, "gan/trainer.py": DUCK["gan/trainer.py"].replace("log_data = MetricLog()", "log_data = make_logger()")})
    assert findings(tmp_path, ["gan/nets.py"], "TL401") == {}


def test_a_module_clearing_its_own_gradients_is_no_optimizer_its_methods_return_tensors(tmp_path: Path) -> None:
    # mimicry's InfoMax discriminator: `self.zero_grad()` (the module's own) does not make `self` an
    # optimizer, so `self.compute_infomax_loss(...)` returns what that method of the class returns
    nets = DUCK["gan/nets.py"].replace("                opt.zero_grad()\n", "").replace(
        "            def train_step(", "            def penalty(self, x):\n                return self.net(x).pow(2).mean()\n\n            def train_step(",
    ).replace(
        "                loss = self.net(batch.to(device)).pow(2).mean()\n",
        "                self.zero_grad()\n                reg = self.penalty(batch.to(device))\n                loss = self.net(batch.to(device)).mean() + reg\n",
    ).replace('log_data.add_metric("loss", loss)', 'log_data.add_metric("reg", reg)')
    write(tmp_path, {**DUCK, "gan/nets.py": nets})
    assert list(findings(tmp_path, ["gan/nets.py"], "TL401")) == ["gan/nets.py:19:TL401"]


# A GAN trainer framework: the base class's loop calls `self._train_step(batch)`, an abstract method
# each subclass of another module overrides; the override backpropagates through the base's
# `_update_generator`, whose optimizers a dict holds, and logs through the base's `_record_loss`
GAN_BASE = """
    import torch


    class TrainerGAN:
        def __init__(self, model, criterion, optimizer, loader, device):
            self.model, self.criterion, self.optimizer = model, criterion, optimizer
            self.loader, self.device = loader, device
            self.total = {}

        def run(self):
            for batch in self.loader:
                self._train_step(batch)

        def _train_step(self, batch):
            raise NotImplementedError

        def _record_loss(self, name, loss):
            if torch.is_tensor(loss):
                loss = loss.item()
            self.total[name] = self.total.get(name, 0.0) + loss

        def _update_generator(self, gen_loss):
            self.optimizer["generator"].zero_grad()
            gen_loss.backward()
            self.optimizer["generator"].step()
"""

GAN_SUBCLASS = """
    from trainer.base import TrainerGAN


    class Trainer(TrainerGAN):
        def _train_step(self, batch):
            x = batch.to(self.device)
            y = self.model["generator"](x)
            gen_loss = self.criterion["mel"](y, x)
            aux_loss = self.criterion["aux"](y, x)
            self._record_loss("generator_loss", gen_loss)
            self._record_loss("aux_loss", aux_loss)
            self._UPDATE(gen_loss)
"""

GAN_MAIN = """
    import torch

    from trainer.autoencoder import Trainer


    def main(loader, criterion):
        device = torch.device("cuda")
        model = {"generator": torch.nn.Linear(4, 4).to(device)}
        optimizer = {"generator": torch.optim.Adam(model["generator"].parameters())}
        Trainer(model, criterion, optimizer, loader, device).run()
"""


@pytest.mark.parametrize("update, found", [
    # the loss handed to the base's update is a tensor with a graph: logging it reads the device (the
    # auxiliary loss, never backpropagated, is of no known kind)
    ("_update_generator", ["trainer/autoencoder.py:11:TL401"]),
    # a method of the base that neither steps nor backpropagates: no step, nothing per step
    ("_record_loss", []),
])
def test_a_base_class_loop_runs_the_override_that_updates_through_the_base(tmp_path: Path, update: str, found: list[str]) -> None:
    files = {"trainer/__init__.py": "", "trainer/base.py": GAN_BASE, "trainer/autoencoder.py": GAN_SUBCLASS.replace("_UPDATE", update), "main.py": GAN_MAIN}
    write(tmp_path, files)
    assert sorted(findings(tmp_path, ["trainer/autoencoder.py", "trainer/base.py"], "TL401")) == found


# -- an object built in `main` and handed through the script's own functions to another module's loop

FORWARDED_CRITERION = """
    import torch


    class SetCriterion(torch.nn.Module):
        def forward(self, outputs, targets):
            cost = (outputs - targets).abs().detach().cpu().numpy()
            return (outputs - targets).abs().mean() + float(cost.min())


    def build_criterion(args):
        return SetCriterion()
"""

FORWARDED_ENGINE = """
    def train_one_epoch(model, optimizer, criterion, loader, device):
        for x, y in loader:
            loss = criterion(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""

FORWARDED_MAIN = """
    import torch

    from criterion import build_criterion
    from engine import train_one_epoch


    def do_train(args, model, optimizer, criterion, loader):
        device = torch.device("cuda")
        for epoch in range(args.epochs):
            train_one_epoch(model, optimizer, criterion, loader, device)


    def main(args, loader):
        model = torch.nn.Linear(4, 4).cuda()
        criterion = build_criterion(args)
        criterion = criterion.cuda()
        optimizer = torch.optim.AdamW(model.parameters())
        if args.test_only:
            criterion = None
        else:
            do_train(args, model, optimizer, criterion, loader)
"""


@pytest.mark.parametrize("rebinding, found", [
    ("", {"criterion.py:7:TL401": [[("engine.py", 4)]]}),
    # the script's function replaces what it is handed before passing it on: the built criterion never reaches the loop
    ("        criterion = torch.nn.L1Loss()\n", {}),
])
def test_an_object_handed_through_the_script_s_own_functions_runs_in_the_loop_it_reaches(tmp_path: Path, rebinding: str, found: dict) -> None:
    main = FORWARDED_MAIN.replace('        device = torch.device("cuda")\n', '        device = torch.device("cuda")\n' + rebinding)
    write(tmp_path, {"criterion.py": FORWARDED_CRITERION, "engine.py": FORWARDED_ENGINE, "main.py": main})
    assert findings(tmp_path, ["criterion.py"], "TL401") == found


# -- a framework's trainer handed games of many classes, each by its own script

GAME_TRAINER = """
    import torch


    class Trainer:
        def __init__(self, game, optimizer, train_data, device):
            self.game = game
            self.optimizer = optimizer
            self.train_data = train_data
            self.device = device
            if device.type == "cuda" and device.index is not None:
                self.game = torch.nn.parallel.DistributedDataParallel(self.game, device_ids=[device.index])
            else:
                self.game.to(self.device)

        def train_epoch(self):
            for batch in self.train_data:
                loss, interaction = self.game(*[x.to(self.device) for x in batch])
                loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()
"""

GAME_CLASSES = """
    import torch


    class Game{n}(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x, y):
            out = self.lin(x)
            lengths = torch.ones(out.size(0)).to(out.device)
            return ((out - y) ** 2).mean(), lengths
"""

GAME_SCRIPT = """
    import torch

    from core.games{n} import Game{n}
    from core.trainers import Trainer


    def main(loader):
        game = Game{n}()
        Trainer(game, torch.optim.Adam(game.parameters()), loader, torch.device("cuda")).train_epoch()
"""


@pytest.mark.parametrize("games, found", [
    # six scripts, six games: each script's game runs in the trainer's loop
    (6, {"core/games0.py:12:TL406": [[("trainers.py", 18)]]}),
    # more classes than an object is followed through (`MAX_ALTERNATIVES`): none of them is
    (9, {}),
])
def test_a_trainer_handed_a_game_of_one_of_several_classes_runs_each_game_s_forward(tmp_path: Path, games: int, found: dict) -> None:
    files = {"core/__init__.py": "", "core/trainers.py": GAME_TRAINER}
    for n in range(games):
        files[f"core/games{n}.py"] = GAME_CLASSES.replace("{n}", str(n))
        files[f"zoo/play{n}.py"] = GAME_SCRIPT.replace("{n}", str(n))
    write(tmp_path, files)
    assert findings(tmp_path, ["core/games0.py"], "TL406") == found


# -- a read in a project base's method that a subclass runs through `super()` -----------------------

SUPER_BASE = """
    import torch


    class ModelPlain:
        def __init__(self, net, device):
            self.net = net.to(device)
            self.device = device
            self.optimizer = torch.optim.Adam(self.net.parameters())
            self.log_dict = {}

        def feed_data(self, data):
            self.L = data["L"].to(self.device)
            self.H = data["H"].to(self.device)

        def optimize_parameters(self, step):
            self.optimizer.zero_grad()
            loss = (self.net(self.L) - self.H).abs().mean()
            loss.backward()
            self.optimizer.step()
            self.log_dict["G_loss"] = loss.item()
"""

SUPER_SUBCLASS = """
    from models.model_plain import ModelPlain


    class ModelVRT(ModelPlain):
        def optimize_parameters(self, step):
            if step == 0:
                self.net.requires_grad_(False)
            super(ModelVRT, self).optimize_parameters(step)
"""

SUPER_TRAIN = """
    import torch

    from models.model_vrt import ModelVRT


    def main(loader):
        model = ModelVRT(torch.nn.Linear(4, 4), torch.device("cuda"))
        for step, data in enumerate(loader):
            model.feed_data(data)
            model.optimize_parameters(step)
"""


def test_a_read_a_base_s_method_makes_is_reported_in_the_base_not_at_the_subclass_s_super_call(tmp_path: Path) -> None:
    files = {"models/__init__.py": "", "models/model_plain.py": SUPER_BASE, "models/model_vrt.py": SUPER_SUBCLASS, "train.py": SUPER_TRAIN}
    write(tmp_path, files)
    found = findings(tmp_path, ["models/model_plain.py", "models/model_vrt.py", "train.py"], "TL401")
    assert sorted(found) == ["models/model_plain.py:21:TL401"]


# -- anomaly detection switched on by a script that trains through the project's own trainer -------

ANOMALY_SCRIPT = """
    import torch

    from core.trainers import Trainer
    from core.games0 import Game0


    def main(loader):
        game = Game0()
        trainer = Trainer(game, torch.optim.Adam(game.parameters()), loader, torch.device("cuda"))
        trainer.RUN()


    if __name__ == "__main__":
        torch.autograd.set_detect_anomaly(True)
        main([])
"""


@pytest.mark.parametrize("run, found", [
    # the trainer's epoch runs the steps, under the switch the script turned on
    ("train_epoch", ["zoo/template.py:15:TL404"]),
    # a method of the trainer that trains nothing: nothing runs under the switch
    ("__init__", []),
])
def test_anomaly_detection_in_a_script_training_through_the_project_s_trainer(tmp_path: Path, run: str, found: list[str]) -> None:
    files = {"core/__init__.py": "", "core/trainers.py": GAME_TRAINER, "core/games0.py": GAME_CLASSES.replace("{n}", "0")}
    files["zoo/template.py"] = ANOMALY_SCRIPT.replace("RUN", run)
    write(tmp_path, files)
    assert sorted(findings(tmp_path, ["zoo/template.py"], "TL404")) == found
