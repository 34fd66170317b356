"""Functions as values: a name or attribute holding a function runs that function when called, found
from its bindings (`torch.compile(train_step)`, an alias, `functools.partial`, a closure a factory
returns, a tuple a helper returns), never from the name it is called by (DESIGN.md: "Values, not
names")."""

from __future__ import annotations

from tests.helpers import lint

STEPS = """
import torch
from functools import partial

model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(batch):
    loss = model(batch).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()


def make_step(model, opt):
    def step(batch):
        loss = model(batch).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()
    return step


def compiled(loader):
    step = torch.compile(train_step)
    for b in loader:
        step(b.cuda())


def aliased(loader):
    fn = train_step
    for b in loader:
        fn(b.cuda())


def made(loader):
    step = make_step(model, opt)
    for b in loader:
        step(b.cuda())


def bound(loader):
    fn = partial(train_step)
    for b in loader:
        fn(b.cuda())
"""


def _chains(code: str, rule: str) -> dict[int, list[int]]:
    """For each finding of `rule`, the lines of the calls its chains start from."""
    return {d.line: sorted(c[0].line for c in d.chains) for d in lint(code, rule)}


def test_a_step_called_through_a_function_value_is_reached_from_the_loop_that_calls_it() -> None:
    # train_step from the compiled, aliased and bound copies; make_step's closure from `made` only:
    # `step(...)` in `compiled` holds torch.compile(train_step), not the closure that shares its name
    assert _chains(STEPS, "TL401") == {14: [30, 36, 48], 23: [42]}


def test_a_local_variable_shadows_a_function_of_the_same_name() -> None:
    code = """
    import torch

    model = torch.nn.Linear(4, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)


    def log(loss):
        print(loss.mean().item())  # (a value it computes: reported here, with its chain)


    def train(loader, log=print):
        for b in loader:
            loss = model(b.cuda()).sum()
            loss.backward()
            opt.step()
            log(loss)
    """
    # the parameter `log` shadows the module's `log`: the step does not run it
    assert _chains(code, "TL401") == {}
    assert _chains(code.replace(", log=print", ""), "TL401") == {9: [17]}


PROFILER = """
import torch
from transformers import TrainerCallback


class ProfilerCallback(TrainerCallback):
    @staticmethod
    def _accelerator():
        if torch.cuda.is_available():
            return torch.cuda.Event, torch.cuda.synchronize
        return None, None

    def __init__(self):
        self._event, self._synchronize = self._accelerator()

    def on_step_end(self, args, state, control, **kwargs):
        if self._event is None:
            return
        self._synchronize()
"""


def test_an_attribute_holding_torch_s_synchronize_synchronises_when_called() -> None:
    found = lint(PROFILER, "TL402")
    assert [(d.line, d.code) for d in found] == [(19, "TL402")]
    assert "`self._synchronize()` is `torch.cuda.synchronize` here" in found[0].message


def test_an_attribute_holding_another_function_of_the_pair_does_not() -> None:
    # the event class sits in the first place of the tuple, the synchronize in the second
    assert lint(PROFILER.replace("self._event, self._synchronize = ", "self._synchronize, self._event = "), "TL402") == []


def test_a_function_value_returned_to_another_module_is_not_taken_for_one_of_its_own(tmp_path) -> None:
    # `make_loss` returns its closure (steps.py's fourth function); in train.py that value must not
    # stand for train.py's own fourth function, `report`, which no step runs
    from tests.test_library_hooks import lint_tree

    files = {
        "steps.py": """
            import torch


            def scale(x):
                return x * 2


            def shift(x):
                return x + 1


            def make_loss(model):
                def loss_fn(batch):
                    return model(batch).sum()
                return loss_fn


            def clip(model):
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        """,
        "train.py": """
            import torch

            from steps import make_loss


            def load():
                return torch.zeros(3)


            def build():
                return torch.nn.Linear(3, 1).cuda()


            def optimizer(model):
                return torch.optim.SGD(model.parameters(), lr=0.1)


            def report(model):
                torch.cuda.synchronize()
                print(model.weight.norm())


            def main(loader):
                model = build()
                opt, loss_fn = optimizer(model), make_loss(model)
                for batch in loader:
                    loss_fn(batch.cuda()).backward()
                    opt.step()
                    opt.zero_grad()
        """,
    }
    assert lint_tree(tmp_path, files) == []


TOKENIZED = """
import torch
from torch import nn, tensor
from torch.nn.utils.rnn import pad_sequence


def list_str_to_tensor(text):
    return pad_sequence([tensor([*bytes(t, "UTF-8")]) for t in text], padding_value=-1)


class TTS(nn.Module):
    def __init__(self, tokenizer="char_utf8"):
        super().__init__()
        if callable(tokenizer):
            self.tokenizer = tokenizer
        elif tokenizer == "char_utf8":
            self.tokenizer = list_str_to_tensor
        self.proj = nn.Linear(4, 4)

    def forward(self, x, text):
        if isinstance(text, list):
            text = self.tokenizer(text).to(x.device)
        return self.proj(x).sum() + text.float().mean()


model = TTS().cuda()
opt = torch.optim.Adam(model.parameters())
for x, text in loader:
    loss = model(x.cuda(), text)
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def test_an_option_that_picks_a_function_for_an_attribute_calls_that_function() -> None:
    # e2-tts's tokenizer: the string option selects `list_str_to_tensor`, whose padded host tensor
    # is copied to the device every step (the branch assigning the option itself cannot be the one
    # called: a string is not callable)
    found = lint(TOKENIZED, "TL406")
    assert [(d.line, d.code) for d in found] == [(22, "TL406")]
    assert "`self.tokenizer(text)` is built on the host" in found[0].message


def test_a_function_the_option_picks_that_builds_on_the_device_moves_nothing() -> None:
    # the same call and `.to()`, but the chosen function builds its tensor on the device
    on_device = TOKENIZED.replace('tensor([*bytes(t, "UTF-8")])', 'tensor([*bytes(t, "UTF-8")], device="cuda")')
    assert lint(on_device, "TL406") == []


LOSS_FACTORY = """
import torch


def init_loss(tau=0.1):
    def loss(anchors, targets, prototypes):
        probs = torch.softmax(anchors @ prototypes.T / tau, dim=1)
        with torch.no_grad():
            targets = torch.softmax(targets @ prototypes.T / tau, dim=1)
            used = float(len(set(targets.argmax(dim=1).tolist())))
        return -(targets * torch.log(probs)).sum(dim=1).mean(), used

    return loss


def main(encoder, loader, optimizer, device):
    prototypes = torch.randn(10, 16){moved}
    criterion = init_loss()
    for x in loader:
        optimizer.zero_grad()
        loss, used = criterion(encoder(x[0]), encoder(x[1]), prototypes)
        loss.backward()
        optimizer.step()
"""


def test_a_closure_a_factory_returns_is_given_what_its_calls_pass() -> None:
    # `criterion(...)` runs the nested `loss`: its parameter `prototypes` is the device tensor passed
    diagnostics = lint(LOSS_FACTORY.format(moved=".to(device)"), "TL401")
    assert [d.line for d in diagnostics if d.code == "TL401"] == [10]


def test_a_closure_given_host_tensors_reads_nothing_from_the_device() -> None:
    diagnostics = lint(LOSS_FACTORY.format(moved=""), "TL401")
    assert [d.line for d in diagnostics if d.code == "TL401"] == []
