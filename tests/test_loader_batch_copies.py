"""A loader's batch copied to the device under another name stays on the host: reading it waits
for nothing, while reading the copy does (DESIGN.md, "What per step means"; TL401's page)."""

from __future__ import annotations

from tests.helpers import lint

# pydreamer's loop: the batch drawn with `next`, copied element by element by a helper given a
# lambda that moves each, then the host batch's statistics logged every step
NEXT_BATCH = """
import torch
from torch.utils.data import DataLoader


def map_structure(data, f):
    return {k: f(v) for k, v in data.items()}


def train(model, data, optimizer, device):
    model.to(device)
    data_iter = iter(DataLoader(data, batch_size=None, pin_memory=True))
    while True:
        batch, wid = next(data_iter)
        obs = COPY
        loss = model(obs)
        loss.backward()
        optimizer.step()
        print(READ.float().mean().item())
"""


def _lines(code: str) -> list[int]:
    return [d.line for d in lint(code, "TL401")]


def test_the_batch_a_lambda_copies_to_the_device_is_read_on_the_host() -> None:
    code = NEXT_BATCH.replace("COPY", "map_structure(batch, lambda x: x.to(device))")
    assert _lines(code.replace("READ", 'batch["reward"]')) == []
    assert _lines(code.replace("READ", 'obs["reward"]')) == [19]


def test_the_batch_a_comprehension_copies_to_the_device_is_read_on_the_host() -> None:
    code = NEXT_BATCH.replace("COPY", "{k: v.cuda() for k, v in batch.items()}")
    assert _lines(code.replace("READ", 'batch["reward"]')) == []
    assert _lines(code.replace("READ", 'obs["reward"]')) == [19]


def test_the_batch_a_loop_draws_and_copies_to_the_device_is_read_on_the_host() -> None:
    code = """
    import torch
    def train(model, loader, optimizer, device):
        for batch in loader:
            inputs = {k: v.to(device) for k, v in batch.items()}
            loss = model(**inputs)
            loss.backward()
            optimizer.step()
            print(batch["y"].float().mean().item(), inputs["y"].float().mean().item())
    """
    found = lint(code, "TL401")
    assert [d.line for d in found] == [9]
    assert "`inputs[\"y\"].float().mean().item()`" in found[0].message and "batch" not in found[0].message


def test_a_collection_copied_by_a_statement_that_drops_the_copies_places_nothing() -> None:
    # `[m.cuda() for m in nets]` as a statement moves modules in place: no evidence of a host batch
    code = NEXT_BATCH.replace("        obs = COPY\n", "        [v.cuda() for v in batch.values()]\n        obs = batch\n")
    assert _lines(code.replace("READ", 'batch["reward"]')) == [20]


def test_a_batch_copied_by_nothing_keeps_its_unknown_place() -> None:
    # (no copy: where the loader's batch lives is not known, and its read is reported as before)
    code = NEXT_BATCH.replace("COPY", "batch")
    assert _lines(code.replace("READ", 'batch["reward"]')) == [19]


def test_a_move_made_as_a_statement_of_its_own_places_nothing_before_it() -> None:
    # `batch.cuda()` alone may be a module moved in place: no evidence of where the value was
    code = NEXT_BATCH.replace("        obs = COPY\n", "        batch.cuda()\n        obs = batch\n")
    assert _lines(code.replace("READ", 'batch["reward"]')) == [20]
