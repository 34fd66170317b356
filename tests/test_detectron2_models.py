"""detectron2's trainers run the model every step: `build_model(cfg)` builds the class registered in
`META_ARCH_REGISTRY` that the configuration names, and `run_step` calls `self.model(data)` for every
batch. The registered class's `forward` is a step hook (its training branch; the inference branch
is no step), and what its `@configurable` constructor receives from `from_config` is what its
attributes hold (Mask2Former's `SetCriterion`, whose `.item()` runs every step)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint, lint_project as _lint_project


def lint_project(root: Path, files: dict[str, str], select: str) -> list[str]:
    root.mkdir(exist_ok=True)
    return _lint_project(root, files, select)

CRITERION = """\
import torch
from torch import nn


class SetCriterion(nn.Module):
    def __init__(self, matcher):
        super().__init__()
        self.matcher = matcher

    def forward(self, outputs, targets):
        num_masks = torch.as_tensor([len(targets)], dtype=torch.float, device=outputs.device)
        num_masks = torch.clamp(num_masks, min=1).item()
        return {"loss": outputs.sum() / num_masks}
"""


def model(register: str = "@META_ARCH_REGISTRY.register()", configurable: str = "@configurable", returned: str = 'return {"criterion": criterion, "scale": 2}') -> str:
    return f"""\
import torch
from torch import nn
from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY

from criterion import SetCriterion


{register}
class MaskFormer(nn.Module):
    {configurable}
    def __init__(self, *, criterion: nn.Module, scale: int):
        super().__init__()
        self.criterion = criterion
        self.scale = scale

    @classmethod
    def from_config(cls, cfg):
        criterion = SetCriterion(matcher=None)
        {returned}

    def forward(self, batched_inputs):
        images = torch.stack([x["image"] for x in batched_inputs]).to("cuda")
        outputs = images * self.scale
        if self.training:
            targets = [x["instances"] for x in batched_inputs]
            return self.criterion(outputs, targets)
        else:
            return outputs.argmax(1).cpu()
"""


def test_the_criterion_a_registered_model_is_configured_with_runs_every_step(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"criterion.py": CRITERION, "maskformer.py": model()}, "TL401")
    assert found == ["criterion.py:12:TL401"]  # (not the inference branch's `.cpu()`)


def test_a_dict_filled_key_by_key_configures_it_too(tmp_path: Path) -> None:
    returned = 'ret = {"scale": 2}\n        ret["criterion"] = criterion\n        return ret'
    found = lint_project(tmp_path, {"criterion.py": CRITERION, "maskformer.py": model(returned=returned)}, "TL401")
    assert found == ["criterion.py:12:TL401"]


def test_a_model_no_library_registry_builds_is_no_step(tmp_path: Path) -> None:
    # the same class, not registered: nothing runs its forward (a demo's model, a project's own registry)
    assert lint_project(tmp_path / "a", {"criterion.py": CRITERION, "maskformer.py": model(register="")}, "TL401") == []
    own = model(register="@MODELS.register()").replace("from detectron2.modeling import META_ARCH_REGISTRY", "from registry import MODELS")
    found = lint_project(tmp_path / "b", {"criterion.py": CRITERION, "maskformer.py": own, "registry.py": "MODELS = None\n"}, "TL401")
    assert found == []


def test_a_key_from_config_may_not_give_says_nothing_of_the_criterion(tmp_path: Path) -> None:
    # a `**` that may override the key, or a constructor that is not detectron2's `configurable`
    returned = 'return {"criterion": criterion, **cfg.extra, "scale": 2}'
    assert lint_project(tmp_path / "a", {"criterion.py": CRITERION, "maskformer.py": model(returned=returned)}, "TL401") == []
    plain = model(configurable="").replace("from detectron2.config import configurable", "")
    assert lint_project(tmp_path / "b", {"criterion.py": CRITERION, "maskformer.py": plain}, "TL401") == []


def test_the_registered_forward_reads_on_the_host_in_its_training_branch_only() -> None:
    code = """\
    import torch
    from torch import nn
    from detectron2.modeling import META_ARCH_REGISTRY

    @META_ARCH_REGISTRY.register()
    class Detector(nn.Module):
        def forward(self, batched_inputs):
            images = torch.stack([x["image"] for x in batched_inputs]).to("cuda")
            logits = images.mean((2, 3))
            if not self.training:
                return logits.argmax(1).tolist()
            loss = logits.logsumexp(1).mean()
            print(loss.item())
            return {"loss": loss}
    """
    assert [d.line for d in lint(code, "TL401", name="detector.py")] == [13]


HEADS = """\
import torch
from torch import nn
from {source} import ROI_HEADS_REGISTRY


@ROI_HEADS_REGISTRY.register()
class CascadeHeads(nn.Module):
    def forward(self, features, proposals):
        num_fg = torch.as_tensor([len(proposals)], dtype=torch.float, device="cuda")
        num_fg = torch.clamp(num_fg, min=1).item()
        return {{"loss_cls": features.sum() / num_fg}}
"""

RCNN = """\
import torch
from torch import nn
from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY, build_roi_heads


@META_ARCH_REGISTRY.register()
class RCNN(nn.Module):
    @configurable
    def __init__(self, *, roi_heads):
        super().__init__()
        self.roi_heads = roi_heads

    @classmethod
    def from_config(cls, cfg):
        return {"roi_heads": build_roi_heads(cfg, None)}

    def forward(self, batched_inputs):
        features = torch.stack([x["image"] for x in batched_inputs]).to("cuda")
        return self.roi_heads(features, batched_inputs)
"""


def test_the_heads_a_library_builder_builds_are_those_registered_in_its_registry(tmp_path: Path) -> None:
    # `build_roi_heads(cfg, shape)` builds the class `ROI_HEADS_REGISTRY` holds under the configured name
    files = {"heads.py": HEADS.format(source="detectron2.modeling"), "rcnn.py": RCNN}
    assert lint_project(tmp_path / "a", files, "TL401") == ["heads.py:10:TL401"]
    # a registry of the project's own of the same name is not the one detectron2's builder reads
    files = {"heads.py": HEADS.format(source="registry"), "registry.py": "ROI_HEADS_REGISTRY = None\n", "rcnn.py": RCNN}
    assert lint_project(tmp_path / "b", files, "TL401") == []
