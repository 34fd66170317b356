"""Methods a class inherits from a project base class in another module, called on `self`: an RL
library's agents call `self.take_optimisation_step(optimizer, network, loss)`, defined once in their
base class, which backpropagates, steps and logs `loss.item()`. The call is the agent's update and
runs every step; the read is reported once, at the calls that pass the device loss."""

from __future__ import annotations

from pathlib import Path

from tests.test_library_hooks import lint_tree

AGENTS = {
    "agents/__init__.py": "",
    "agents/base.py": """
        import torch


        class BaseAgent:
            def __init__(self, device):
                self.device = torch.device(device)

            def take_optimisation_step(self, optimizer, network, loss, clipping_norm=None, retain_graph=False):
                optimizer.zero_grad()
                loss.backward(retain_graph=retain_graph)
                print("Loss -- {}".format(loss.item()))
                if clipping_norm is not None:
                    torch.nn.utils.clip_grad_norm_(network.parameters(), clipping_norm)
                optimizer.step()
    """,
    "agents/dqn.py": """
        import torch
        import torch.nn.functional as F
        from agents.base import BaseAgent


        class DQN(BaseAgent):
            def __init__(self, device):
                super().__init__(device)
                self.q_network = torch.nn.Linear(4, 2).to(device)
                self.optimizer = torch.optim.Adam(self.q_network.parameters())

            def train(self, batches):
                for states, targets in batches:
                    states, targets = states.to(self.device), targets.to(self.device)
                    loss = F.mse_loss(self.q_network(states), targets)
                    self.take_optimisation_step(self.optimizer, self.q_network, loss, 1.0)
    """,
}


def test_a_step_helper_a_class_inherits_from_another_module_is_its_update_and_reads_the_loss_at_the_call(tmp_path: Path) -> None:
    # the read is the callers' (they pass the device loss), reported at the call, not again in the helper
    assert lint_tree(tmp_path, AGENTS) == ["agents/dqn.py:17:TL401"]


def test_a_helper_some_callers_pass_an_unknown_value_is_reported_at_the_calls_that_pass_the_device_loss(tmp_path: Path) -> None:
    files = dict(AGENTS)
    files["agents/ddpg.py"] = """
        from agents.base import BaseAgent


        class DDPG(BaseAgent):
            def __init__(self, device, actor, optimizer):
                super().__init__(device)
                self.actor, self.optimizer = actor, optimizer

            def train(self, batches, compute_loss):
                for batch in batches:
                    self.take_optimisation_step(self.optimizer, self.actor, compute_loss(self.actor, batch))
    """
    assert lint_tree(tmp_path, files) == ["agents/dqn.py:17:TL401"]


def test_a_method_the_subclass_defines_itself_is_its_own_not_the_base_s(tmp_path: Path) -> None:
    files = dict(AGENTS)
    files["agents/dqn.py"] = AGENTS["agents/dqn.py"] + """

            def take_optimisation_step(self, optimizer, network, loss, clipping_norm=None):
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """
    # the base's helper, which no module calls now, is a step of its own that reads its own loss
    assert lint_tree(tmp_path, files) == ["agents/base.py:12:TL401"]


# A Keras-like model zoo: `BaseModel.fit` runs the step loop and calls the model through `self`
# (`model = self.train()`, wrapped in `DataParallel` on several GPUs); each model of another module
# subclasses it and defines `forward`, which therefore runs every step.
ZOO = {
    "zoo/__init__.py": "",
    "zoo/basemodel.py": """
        import torch
        from torch import nn


        class BaseModel(nn.Module):
            def __init__(self, device="cpu", gpus=None):
                super().__init__()
                self.device = device
                self.gpus = gpus

            def fit(self, loader, epochs=1):
                model = self.train()
                if self.gpus:
                    model = torch.nn.DataParallel(model, device_ids=self.gpus)
                optim = torch.optim.Adam(self.parameters())
                for epoch in range(epochs):
                    for x, y in loader:
                        x = x.to(self.device)
                        pred = CALL
                        loss = nn.functional.mse_loss(pred, y.to(self.device))
                        optim.zero_grad()
                        loss.backward()
                        optim.step()
    """,
    "zoo/dien.py": """
        from zoo.basemodel import BaseModel


        class DIEN(BaseModel):
            def forward(self, x):
                n = (x > 0).sum(1).max().item()
                return x[:, :n]
    """,
    "run_dien.py": """
        from zoo.dien import DIEN

        if __name__ == "__main__":
            DIEN(device="cuda:0").fit(loader=None, epochs=3)
    """,
}


def test_a_base_module_s_fit_calling_the_model_through_self_runs_the_subclass_s_forward(tmp_path: Path) -> None:
    for call in ("model(x)", "self(x)", "self.forward(x)"):
        files = {**ZOO, "zoo/basemodel.py": ZOO["zoo/basemodel.py"].replace("CALL", call)}
        assert lint_tree(tmp_path, files) == ["zoo/dien.py:7:TL401"], call


def test_a_base_module_calling_another_object_runs_no_forward_of_the_subclass(tmp_path: Path) -> None:
    # `model` is rebound to something that is not `self` on one path: the subclass's forward is not its
    files = {**ZOO, "zoo/basemodel.py": ZOO["zoo/basemodel.py"].replace("CALL", "model(x)").replace(
        "\n                optim = torch.optim", "\n                if epochs > 100:\n                    model = self.teacher\n                optim = torch.optim")}
    assert lint_tree(tmp_path, files) == []
