"""Rows a step builds from its batch by appends: `labels = []`, then `labels.append(classes[int(v)])`
for each label the loader gave (V-JEPA 2's verb, noun and action classes), wrapped by `torch.tensor` and
moved: the batch's own values crossing once, not a host constant rebuilt every step (TL406). A list
filled with numbers the code chose, or with values read back from the device, is still reported."""

from __future__ import annotations

from tests.helpers import lines

STEP = """\
import torch

device = torch.device("cuda")
for clips, verbs in loader:
    clips = clips.to(device)
    labels = []
    for v in verbs:
        labels.append(classes[int(v)])
    labels = torch.tensor(labels).to(device)
    loss = model(clips, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_rows_appended_from_the_batch_are_data() -> None:
    assert lines(STEP, "TL406") == []


def test_rows_appended_from_numbers_the_code_chose_are_reported() -> None:
    chosen = STEP.replace("for v in verbs:", "for v in range(4):").replace("classes[int(v)]", "v * 2")
    assert lines(chosen, "TL406") == [9]


def test_rows_appended_from_values_read_back_from_the_device_are_reported() -> None:
    read_back = STEP.replace("for clips, verbs in loader:", "for clips, verbs in loader:\n    verbs = verbs.to(device)")
    assert lines(read_back, "TL406") == [10]


def test_rows_appended_from_what_a_function_returns_are_reported() -> None:
    # (AutoGAN's controller: an inception score per sampled architecture, numbers the step computes)
    scores = STEP.replace("labels.append(classes[int(v)])", "labels.append(get_score(model, v))")
    assert lines(scores, "TL406") == [9]
