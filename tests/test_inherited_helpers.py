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
