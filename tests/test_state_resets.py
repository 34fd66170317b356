"""State a module keeps on `self` across a decoder's time steps, rebuilt from nothing every training
step by a method that another module calls every step (Tacotron's attention: the decoder calls
`attention.init_states(inputs)` before each pass): one step's graph at most, not a growing history.
Rebuilt only in `__init__`, it is kept across steps and reported."""

from __future__ import annotations

from pathlib import Path

from tests.test_library_hooks import lint_tree

ATTENTION = {
    "pkg/__init__.py": "",
    "pkg/attentions.py": """
        import torch
        from torch import nn


        class LocationAttention(nn.Module):
            def __init__(self):
                super().__init__()
                self.query = nn.Linear(4, 4)
                self.weights_cum = None

            def init_states(self, inputs):
                self.weights_cum = torch.zeros(inputs.shape[:2], device=inputs.device)
                self.mu_prev = torch.zeros(inputs.shape[0], 4, device=inputs.device)

            def forward(self, query, inputs):
                alignment = torch.softmax(self.query(query) @ inputs.transpose(1, 2), -1).squeeze(1)
                self.weights_cum += alignment
                self.mu_prev = self.mu_prev + alignment[:, :4]
                return alignment
    """,
    "train.py": """
        import torch
        from torch import nn
        from pkg.attentions import LocationAttention


        class Decoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.attention = LocationAttention()

            def forward(self, queries, inputs):
                self.attention.init_states(inputs)
                return torch.stack([self.attention(q, inputs) for q in queries.unbind(1)], 1)


        def train(loader, optimizer):
            model = Decoder().cuda()
            for queries, inputs in loader:
                optimizer.zero_grad()
                model(queries.cuda(), inputs.cuda()).sum().backward()
                optimizer.step()
    """,
}


def test_state_rebuilt_every_step_by_another_module_s_call_is_no_history(tmp_path: Path) -> None:
    assert [f for f in lint_tree(tmp_path, ATTENTION) if "TL302" in f] == []
    assert [f for f in lint_tree(tmp_path, {}, paths=["pkg/attentions.py"]) if "TL302" in f] == []


def test_state_rebuilt_only_when_built_is_a_history(tmp_path: Path) -> None:
    files = dict(ATTENTION)
    files["train.py"] = ATTENTION["train.py"].replace("                self.attention.init_states(inputs)\n", "")
    files["train.py"] = files["train.py"].replace("self.attention = LocationAttention()", "self.attention = LocationAttention()\n                self.attention.init_states(torch.zeros(2, 3, 4))")
    found = [f for f in lint_tree(tmp_path, files) if "TL302" in f]
    assert found == ["pkg/attentions.py:18:TL302", "pkg/attentions.py:19:TL302"], found


# LRCN: the recurrent state lives on a submodule; the training helper in another module resets it
# through the model it is given (`model.lstm.reset_hidden_state()`) before each batch
RECURRENT = {
    "models.py": """
        import torch.nn as nn


        class Lstm(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(8, 8, batch_first=True)
                self.hidden_state = None

            def reset_hidden_state(self):
                self.hidden_state = None

            def forward(self, x):
                output, self.hidden_state = self.lstm(x, self.hidden_state)
                return output


        class ConvLstm(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = Lstm()
                self.head = nn.Linear(8, 2)

            def forward(self, x):
                return self.head(self.lstm(x)[:, -1])
    """,
    "train.py": """
        import torch
        from models import ConvLstm


        def forward_step(model, clips, labels, criterion):
            model.lstm.reset_hidden_state()
            return criterion(model(clips), labels)


        def train(loader, optimizer, criterion):
            model = ConvLstm().cuda()
            for clips, labels in loader:
                optimizer.zero_grad()
                forward_step(model, clips.cuda(), labels.cuda(), criterion).backward()
                optimizer.step()
    """,
}


def test_state_a_caller_resets_through_an_attribute_of_the_model_every_step_is_no_history(tmp_path: Path) -> None:
    assert [f for f in lint_tree(tmp_path, RECURRENT) if "TL302" in f] == []
    # never reset: the hidden state links every step's graph to the next
    files = dict(RECURRENT, **{"train.py": RECURRENT["train.py"].replace("    model.lstm.reset_hidden_state()\n", "")})
    assert [f for f in lint_tree(tmp_path, files) if "TL302" in f] == ["models.py:15:TL302"]
