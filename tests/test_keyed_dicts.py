"""Models kept in a dict or a namespace by key (StyleTTS2's `build_model` returning `Munch(text_encoder=...,
decoder=...)`, then `model.text_encoder(texts, lengths)` in the step): each key holds its own object,
so the step runs the `forward` of the one it names, and only that one."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lines
from tests.test_library_hooks import lint_tree
from trainlint.model.lattice import UNKNOWN, Kind, Value

MODELS = """
    import torch
    from munch import Munch
    from torch import nn


    class TextEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x, lengths):
            mask = torch.arange(8).to(x.device) < lengths[:, None]
            return self.proj(x) * mask[..., None]


    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            return self.proj(x)


    def build_model():
        text_encoder = TextEncoder()
        decoder = Decoder()
        nets = Munch(text_encoder=text_encoder, decoder=decoder)
        return nets
"""

TRAIN = """
    import torch

    from nets.models import build_model


    def load_checkpoint(model, path):
        state = torch.load(path)
        return model, state["epoch"]


    def main(loader, args):
        model = build_model()
        _ = [model[key].to("cuda") for key in model]
        if args.resume:
            model, epoch = load_checkpoint(model, args.resume)
        opt = torch.optim.Adam(model.decoder.parameters())
        for x, lengths in loader:
            x, lengths = x.cuda(), lengths.cuda()
            loss = model.text_encoder(x, lengths).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_a_model_a_namespace_holds_under_a_key_runs_every_step(tmp_path: Path) -> None:
    found = lint_tree(tmp_path, {"nets/__init__.py": "", "nets/models.py": MODELS, "train.py": TRAIN})
    assert "nets/models.py:13:TL406" in found


def test_only_the_model_under_the_key_called_runs(tmp_path: Path) -> None:
    # (the decoder runs every step, the text encoder never: its host mask is no finding)
    train = TRAIN.replace("model.text_encoder(x, lengths)", "model.decoder(x)")
    assert "nets/models.py:13:TL406" not in lint_tree(tmp_path, {"nets/__init__.py": "", "nets/models.py": MODELS, "train.py": train})


def test_a_dict_literal_holds_each_object_under_its_key() -> None:
    source = """
        import torch
        from torch import nn


        class Head(nn.Module):
            def forward(self, x):
                return x * torch.ones(4).cuda()


        class Plain(nn.Module):
            def forward(self, x):
                return x


        def train(loader):
            nets = {"head": Head(), "plain": Plain()}
            opt = torch.optim.SGD(nets["plain"].parameters(), lr=0.1)
            for x in loader:
                loss = nets["{key}"](x.cuda()).sum()
                loss.backward()
                opt.step()
    """
    assert lines(source.replace("{key}", "head"), "TL406") == [8]
    assert lines(source.replace("{key}", "plain"), "TL406") == []


def test_keys_are_kept_through_a_join_with_an_unknown_and_lost_with_other_keys() -> None:
    keyed = Value(Kind.COLLECTION, origin="namespace", items=(Value(Kind.MODULE, origin="m.py::A"),), keys=("a",))
    assert (keyed | UNKNOWN).keyed("a") == Value(Kind.MODULE, origin="m.py::A")
    other = Value(Kind.COLLECTION, origin="namespace", items=(Value(Kind.MODULE, origin="m.py::B"),), keys=("b",))
    assert (keyed | other).keys is None and (keyed | other).items is None


def test_namespaces_a_factory_returns_in_a_tuple_hold_wrapped_models_under_their_keys(tmp_path: Path) -> None:
    # StarGAN v2's build_model: each network wrapped in `nn.DataParallel`, kept in two namespaces (the
    # trained nets and their moving averages) returned together, unpacked into attributes, and handed to
    # a loss function that calls the one it names
    models = MODELS.replace("text_encoder = TextEncoder()", "text_encoder = nn.DataParallel(TextEncoder())").replace(
        "        nets = Munch(text_encoder=text_encoder, decoder=decoder)\n        return nets",
        "        nets = Munch(text_encoder=text_encoder, decoder=decoder)\n        nets_ema = Munch(decoder=decoder)\n        return nets, nets_ema",
    )
    train = """
        import torch
        from torch import nn

        from nets.models import build_model


        class Solver(nn.Module):
            def __init__(self):
                super().__init__()
                self.nets, self.nets_ema = build_model()
                self.opt = torch.optim.Adam(self.nets.decoder.parameters())

            def train(self, loader):
                nets = self.nets
                for x, lengths in loader:
                    x, lengths = x.cuda(), lengths.cuda()
                    loss = compute_loss(nets, x, lengths)
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()


        def compute_loss(nets, x, lengths):
            return nets.{key}.mean()
    """
    files = {"nets/__init__.py": "", "nets/models.py": models}
    assert "nets/models.py:13:TL406" in lint_tree(tmp_path, {**files, "train.py": train.replace("{key}", "text_encoder(x, lengths)")})
    assert "nets/models.py:13:TL406" not in lint_tree(tmp_path, {**files, "train.py": train.replace("{key}", "decoder(x)")})
