"""Branches that the steps never take because of what the calls pass, across modules: the `else` of
`if x_mask is not None:` when every call gives a tensor (glow-TTS's squeeze), and the code after `if
not reverse: ... return` when every step call leaves `reverse` False (VITS's stochastic duration
predictor, whose reverse path only inference takes). A step call that passes None or True keeps the
finding."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint
from tests.test_library_hooks import lint_tree

FLOWS = {
    "tts/__init__.py": "",
    "tts/decoder.py": """
        import torch
        from torch import nn


        def squeeze(x, x_mask=None, num_sqz=2):
            b, c, t = x.size()
            if x_mask is not None:
                x_mask = x_mask[:, :, num_sqz - 1 :: num_sqz]
            else:
                x_mask = torch.ones(b, 1, t // num_sqz).to(device=x.device, dtype=x.dtype)
            return x.view(b, c * num_sqz, t // num_sqz) * x_mask, x_mask


        class Decoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Conv1d(4, 4, 1)

            def forward(self, x, x_mask, reverse=False):
                x, x_mask = squeeze(x, x_mask)
                if not reverse:
                    return self.proj(x) * x_mask
                noise = torch.randn(x.size(0), 4, x.size(2)).to(device=x.device)
                return self.proj(x + noise) * x_mask
    """,
    "tts/model.py": """
        import torch
        from torch import nn

        from tts.decoder import Decoder


        class GlowTTS(nn.Module):
            def __init__(self):
                super().__init__()
                self.decoder = Decoder()

            def forward(self, y, y_lengths):
                y_mask = (torch.arange(y.size(2), device=y.device)[None] < y_lengths[:, None]).unsqueeze(1).to(y.dtype)
                return self.decoder(y, y_mask)

            def inference(self, z, z_mask):
                return self.decoder(z, z_mask, reverse=True)
    """,
    "train.py": """
        import torch

        from tts.model import GlowTTS


        def train(loader):
            model = GlowTTS().cuda()
            opt = torch.optim.Adam(model.parameters())
            for y, lengths in loader:
                loss = model(y.cuda(), lengths.cuda()).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    """,
}


def test_branches_no_step_call_takes_are_not_every_step(tmp_path: Path) -> None:
    found = [f for f in lint_tree(tmp_path, FLOWS) if f.startswith("tts/decoder.py")]
    assert found == [], found
    assert lint_tree(tmp_path, {}, paths=["tts/decoder.py"]) == []
    # `!= None` tests the same as `is not None` for what the calls pass
    compared = {**FLOWS, "tts/decoder.py": FLOWS["tts/decoder.py"].replace("if x_mask is not None:", "if x_mask != None:")}
    assert [f for f in lint_tree(tmp_path, compared) if f.startswith("tts/decoder.py")] == []


def test_a_step_call_passing_none_or_the_flag_keeps_the_findings(tmp_path: Path) -> None:
    files = dict(FLOWS)
    files["tts/model.py"] = FLOWS["tts/model.py"].replace("return self.decoder(y, y_mask)", "return self.decoder(y, None, reverse=True)")
    found = [f for f in lint_tree(tmp_path, files) if f.startswith("tts/decoder.py")]
    assert found == ["tts/decoder.py:11:TL406", "tts/decoder.py:24:TL406"], found
    files["tts/decoder.py"] = FLOWS["tts/decoder.py"].replace("if x_mask is not None:", "if x_mask != None:")
    found = [f for f in lint_tree(tmp_path, files) if f.startswith("tts/decoder.py")]
    assert found == ["tts/decoder.py:11:TL406", "tts/decoder.py:24:TL406"], found


GRAD_NORM = """
import torch
from torch._six import inf


def get_grad_norm_(parameters, norm_type: float = 2.0):
    parameters = [p for p in parameters if p.grad is not None]
    norm_type = float(norm_type)
    device = parameters[0].grad.device
    if norm_type == inf:
        total_norm = max(p.grad.detach().abs().max().to(device) for p in parameters)
    else:
        total_norm = torch.norm(torch.stack([torch.norm(p.grad.detach(), norm_type).to(device) for p in parameters]), norm_type)
    return total_norm


class NativeScaler:
    def __init__(self):
        self._scaler = torch.cuda.amp.GradScaler()

    def __call__(self, loss, optimizer, parameters):
        self._scaler.scale(loss).backward()
        self._scaler.unscale_(optimizer)
        norm = get_grad_norm_(parameters{norm_type})
        self._scaler.step(optimizer)
        self._scaler.update()
        return norm


loss_scaler = NativeScaler()
for samples, targets in loader:
    loss = criterion(model(samples.cuda()), targets.cuda())
    loss_scaler(loss, optimizer, model.parameters())
"""


def test_a_numeric_default_no_call_changes_rules_out_its_branch() -> None:
    # mae's and ConvNeXt's get_grad_norm_: the step leaves norm_type at 2.0, so the `inf` branch (its
    # max() over device tensors) never runs; passing inf takes it
    assert [d.line for d in lint(GRAD_NORM.replace("{norm_type}", ""), "TL401")] == []
    taken = lint(GRAD_NORM.replace("{norm_type}", ", norm_type=inf"), "TL401")
    assert [d.line for d in taken] == [GRAD_NORM.splitlines().index("        total_norm = max(p.grad.detach().abs().max().to(device) for p in parameters)") + 1]


# an LSTM classifier whose `forward(text, batch_size=None)` builds its state for the configured batch
# size, or for the one a caller passes: the training step calls `model(text)`, only the prediction
# after training passes `batch_size`
CLASSIFIER = {
    "models/__init__.py": "",
    "models/lstm.py": """
        import torch
        from torch import nn


        class LSTMClassifier(nn.Module):
            def __init__(self, batch_size, hidden):
                super().__init__()
                self.batch_size, self.hidden = batch_size, hidden
                self.lstm = nn.LSTM(hidden, hidden)

            def forward(self, text, batch_size=None):
                if batch_size is None:
                    h_0 = torch.zeros(1, self.batch_size, self.hidden).cuda()
                else:
                    h_0 = torch.zeros(1, batch_size, self.hidden).cuda()
                return self.lstm(text, (h_0, h_0))[0]
    """,
    "main.py": """
        import torch

        from models.lstm import LSTMClassifier


        def train(loader, optimizer):
            model = LSTMClassifier(32, 8).cuda()
            for text, target in loader:
                loss = torch.nn.functional.cross_entropy(model(text.cuda())[-1], target.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            return model


        def predict(model, sentence):
            with torch.no_grad():
                return model(sentence.cuda(), PASSED)
    """,
}


def test_the_branch_for_a_value_no_step_call_passes_is_not_every_step(tmp_path: Path) -> None:
    files = {**CLASSIFIER, "main.py": CLASSIFIER["main.py"].replace("PASSED", "1")}
    assert [f for f in lint_tree(tmp_path, files) if f.endswith("TL406")] == ["models/lstm.py:14:TL406"]


def test_a_step_call_passing_the_value_keeps_its_branch_and_not_the_other(tmp_path: Path) -> None:
    files = {**CLASSIFIER, "main.py": CLASSIFIER["main.py"].replace("PASSED", "1").replace("model(text.cuda())", "model(text.cuda(), 32)")}
    assert [f for f in lint_tree(tmp_path, files) if f.endswith("TL406")] == ["models/lstm.py:16:TL406"]
