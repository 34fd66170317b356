"""Prediction helpers that record graphs (TL303), as agents and model zoos write them: an agent's
`eval_step` running the network its configuration builds (`config.network_fn()`, a module because the
class reads its `parameters()`) and giving back `to_np(q.argmax(-1))`, with `to_np` bound by a star
import of the package (`from ..utils import *`, whose `__init__` star-imports the module defining it);
a knowledge-graph model's `predict` giving back `score.cpu().data.numpy()`. A helper giving back the
tensor, or an attribute nothing says is a module, stays silent."""

from __future__ import annotations

from pathlib import Path

from tests.test_library_hooks import lint_tree

AGENT = {
    "rl/__init__.py": "",
    "rl/utils/__init__.py": "from .config import *\nfrom .torch_utils import *\n",
    "rl/utils/config.py": "SEED = 0\n",
    "rl/utils/torch_utils.py": """
        import torch


        def to_np(t):
            return t.cpu().detach().numpy()
    """,
    "rl/agent/__init__.py": "",
    "rl/agent/dqn.py": """
        from ..utils import *


        class DQNAgent:
            def __init__(self, config):
                self.network = config.network_fn()
                self.optimizer = config.optimizer_fn(self.network.parameters())

            def eval_step(self, state):
                q = self.network(state)['q']
                return to_np(q.argmax(-1))

            def step(self, batch):
                loss = self.network(batch)['q'].mean()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
    """,
}

KG_MODEL = {
    "kg/__init__.py": "",
    "kg/transe.py": """
        import torch
        import torch.nn as nn


        class TransE(nn.Module):
            def __init__(self, ent_tot, dim):
                super().__init__()
                self.ent_embeddings = nn.Embedding(ent_tot, dim)

            def forward(self, data):
                return torch.norm(self.ent_embeddings(data["batch_h"]) - self.ent_embeddings(data["batch_t"]), 1, -1)

            def predict(self, data):
                score = self.forward(data)
                return score.cpu().data.numpy()
    """,
}


def test_an_agents_eval_step_over_its_configured_network_records_a_graph(tmp_path: Path) -> None:
    assert lint_tree(tmp_path, AGENT) == ["rl/agent/dqn.py:11:TL303"]


def test_an_attribute_nothing_says_is_a_module_stays_unknown(tmp_path: Path) -> None:
    files = {**AGENT, "rl/agent/dqn.py": AGENT["rl/agent/dqn.py"].replace("self.network.parameters()", "self.network.params")}
    assert lint_tree(tmp_path, files) == []


def test_a_helper_from_a_module_the_package_does_not_star_import_is_unknown(tmp_path: Path) -> None:
    files = {**AGENT, "rl/utils/__init__.py": "from .config import *\n"}
    assert lint_tree(tmp_path, files) == []


def test_a_models_predict_giving_back_a_host_array_records_a_graph(tmp_path: Path) -> None:
    assert lint_tree(tmp_path, KG_MODEL) == ["kg/transe.py:15:TL303"]


def test_a_predict_giving_back_the_tensor_is_no_prediction_helper(tmp_path: Path) -> None:
    files = {"kg/__init__.py": "", "kg/transe.py": KG_MODEL["kg/transe.py"].replace("return score.cpu().data.numpy()", "return score")}
    assert lint_tree(tmp_path, files) == []
