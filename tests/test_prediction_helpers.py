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


SENTIMENT = {
    "sentiment.py": """
        import torch
        import torch.nn as nn


        class NBoW(nn.Module):
            def __init__(self, vocab_size, dim):
                super().__init__()
                self.embedding = nn.Embedding(vocab_size, dim)
                self.fc = nn.Linear(dim, 2)

            def forward(self, ids):
                return self.fc(self.embedding(ids).mean(dim=1))


        def predict_sentiment(text, model, vocab, device):
            tensor = torch.LongTensor(vocab.lookup_indices(text.split())).unsqueeze(dim=0).to(device)
            prediction = model(tensor).squeeze(dim=0)
            probability = torch.softmax(prediction, dim=-1)
            predicted_class = prediction.argmax(dim=-1).item()
            predicted_probability = probability[predicted_class].item()
            return predicted_class, predicted_probability


        model = NBoW(100, 32).cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for ids, label in loader:
            loss = nn.functional.cross_entropy(model(ids.cuda()), label.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(predict_sentiment("This film is great", model, vocab, "cuda"))
    """,
}


def test_a_helper_giving_back_a_pair_of_numbers_is_a_prediction_helper(tmp_path: Path) -> None:
    # bentrevett's sentiment notebooks: the class and its probability, both read with `.item()`
    assert lint_tree(tmp_path, SENTIMENT) == ["sentiment.py:18:TL303"]


def test_a_helper_giving_back_a_number_and_the_output_is_no_prediction_helper(tmp_path: Path) -> None:
    files = {"sentiment.py": SENTIMENT["sentiment.py"].replace("return predicted_class, predicted_probability", "return predicted_class, probability")}
    assert lint_tree(tmp_path, files) == []


POLICY = {
    "ppo.py": """
        import torch
        import torch.nn as nn


        class ActorCritic(nn.Module):
            def __init__(self, state_dim, action_dim):
                super().__init__()
                self.actor = nn.Sequential(nn.Linear(state_dim, action_dim), nn.Softmax(dim=-1))
                self.critic = nn.Linear(state_dim, 1)

            def act(self, state):
                dist = torch.distributions.Categorical(self.actor(state))
                action = dist.sample()
                return action.detach(), dist.log_prob(action).detach(), self.critic(state).detach()


        class PPO:
            def __init__(self, state_dim, action_dim):
                self.policy_old = ActorCritic(state_dim, action_dim).cuda()

            def select_action(self, state):
                with torch.no_grad():
                    action, logprob, value = self.policy_old.act(torch.FloatTensor(state).cuda())
                return action.item()

            def update(self, states, returns):
                for _ in range(4):
                    loss = (self.policy_old.critic(states).squeeze(-1) - returns).pow(2).mean()
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
    """,
}


def test_a_method_an_attribute_runs_only_under_no_grad_records_no_graph(tmp_path: Path) -> None:
    # PPO-PyTorch: `self.policy_old.act(state)` under no_grad, the attribute an instance of the class
    assert lint_tree(tmp_path, POLICY) == []


def test_a_method_an_attribute_runs_with_grad_is_a_prediction_helper(tmp_path: Path) -> None:
    # near miss: another method runs it with autograd on
    greedy = "            def greedy(self, state):\n                return self.policy_old.act(state)\n\n"
    files = {"ppo.py": POLICY["ppo.py"].replace("            def update(", greedy + "            def update(")}
    assert lint_tree(tmp_path, files) == ["ppo.py:13:TL303"]


# salina's DQN: a probe of the convolution's output size, run once while the network is built
SIZE_PROBE = {
    "agents.py": """
        import torch
        from torch import nn


        class DuelingCnnDQN(nn.Module):
            def __init__(self, input_shape, num_outputs):
                super().__init__()
                self.input_shape = input_shape
                self.features = nn.Sequential(nn.Conv2d(input_shape[0], 8, 3), nn.ReLU())
                self.value = nn.Linear(self.feature_size(), num_outputs)

            def forward(self, x):
                return self.value(self.features(x).view(x.size(0), -1))

            def feature_size(self):
                return RETURNED


        model = DuelingCnnDQN((3, 16, 16), 4).cuda()
        optimizer = torch.optim.Adam(model.parameters())
        for x, y in loader:
            loss = ((model(x.cuda()) - y.cuda()) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """,
}


def test_a_probe_of_a_layer_s_output_size_is_no_prediction_helper(tmp_path: Path) -> None:
    probe = "self.features(torch.zeros(1, *self.input_shape)).view(1, -1).size(1)"
    assert lint_tree(tmp_path, {"agents.py": SIZE_PROBE["agents.py"].replace("RETURNED", probe)}) == []
    # (the output's values, turned into a number, are a prediction: its graph was recorded for nothing)
    assert lint_tree(tmp_path, {"agents.py": SIZE_PROBE["agents.py"].replace("RETURNED", "self.features(torch.zeros(1, *self.input_shape)).argmax().item()")}) == ["agents.py:17:TL303"]
