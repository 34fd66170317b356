"""TL303 by what the code does: a module switched to eval mode and run outside no_grad, in an
evaluation function, in a caller-switched helper, or in the evaluation loop of a training driver."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import lines
from tests.test_device_values import lint_project

# a fast-CIFAR driver: trains, then validates an EMA copy switched with `.train(False)` each epoch
DRIVER = """
import torch

def train(train_model, valid_model, batches, valid_data, optimizer):
    for epoch in range(10):
        for inputs, targets in batches:
            loss = torch.nn.functional.cross_entropy(train_model(inputs), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        correct = []
        for i in range(0, len(valid_data), 512):
            valid_model.train(False)
            logits = valid_model(valid_data[i : i + 512]).detach()
            correct.append(logits.argmax(1))
"""


def test_an_evaluation_loop_inside_a_training_driver():
    assert lines(DRIVER, "TL303") == [14]


def test_a_method_of_the_switched_module_asked_for_its_device_is_no_forward():
    # continual-learning's estimate_kfac_fisher: after the loop that backpropagates per sample, a loop moves
    # the factors it kept with `.to(self._device())`; neither the move nor `_device()` runs the module
    code = """
    import torch
    from torch import nn


    class Learner(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def _device(self):
            return next(self.parameters()).device

        def classify(self, x):
            return self.fc(x).argmax(1)

        def estimate(self, loader, factors):
            self.eval()
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(self.fc(x.to(self._device())), y)
                self.zero_grad()
                loss.backward()
            for label in factors:
                a = factors[label]["A"].to(self._device())
                b = self.classify(factors[label]["B"])
            self.train()
    """
    # (the near miss: `self.classify(x)`, a method given a tensor, is judged on its own: a prediction
    # helper `estimate` calls with grad, reported in it (line 15), not at the moves; a forward of a
    # switched model's method given a batch, `valid_model.classify(x)`, is still a forward)
    assert lines(code, "TL303") == [15]
    assert lines(DRIVER.replace("valid_model(valid_data[i : i + 512])", "valid_model.classify(valid_data[i : i + 512])"), "TL303") == [14]


def test_each_forward_a_graph_starts_from_is_reported_and_not_those_fed_by_one():
    # test-time augmentation: the model runs on the images and on their mirror images, two graphs
    tta = DRIVER.replace(
        "            logits = valid_model(valid_data[i : i + 512]).detach()\n",
        "            regular = valid_data[i : i + 512]\n"
        "            logits1 = valid_model(regular).detach()\n"
        "            logits2 = valid_model(torch.flip(regular, [-1])).detach()\n"
        "            logits = (logits1 + logits2) / 2\n",
    )
    assert lines(tta, "TL303") == [15, 16]
    # a head run on the backbone's features is the same graph: one finding
    head = DRIVER.replace(
        "            logits = valid_model(valid_data[i : i + 512]).detach()\n",
        "            features = valid_model(valid_data[i : i + 512])\n"
        "            logits = valid_model.head(features).detach()\n",
    )
    assert lines(head, "TL303") == [14]


def test_the_driver_evaluating_under_no_grad_or_back_in_training_mode_is_fine():
    guarded = DRIVER.replace("            logits = valid_model", "            with torch.no_grad():\n                logits = valid_model")
    assert lines(guarded, "TL303") == []
    # `.train()` after the switch: the loop runs the module in training mode (it is not evaluation)
    back = DRIVER.replace("            valid_model.train(False)\n", "            valid_model.train(False)\n            valid_model.train()\n")
    assert lines(back, "TL303") == []


def test_a_loop_that_backpropagates_through_an_eval_mode_model_is_training():
    """Fine-tuning with frozen batch-norm statistics: `model.eval()`, then a loop that steps."""
    code = """
    import torch

    def finetune(model, loader, optimizer):
        model.eval()
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
    """
    assert lines(code, "TL303") == []


# an SSD-style evaluation script: the module is switched at the top level, the helper runs it
SCRIPT = """
import torch

def test_net(save_folder, net, dataset):
    detections = []
    for i in range(len(dataset)):
        x = dataset[i].unsqueeze(0)
        detections.append(net(x).data)
    return detections

if __name__ == "__main__":
    net = build_ssd("test", 300, 21)
    net.load_state_dict(torch.load("weights.pth"))
    net.eval()
    test_net("out", net, dataset)
"""


def test_a_helper_whose_caller_switched_its_module_to_eval():
    # `test_net` in `eval.py` is no pytest test: pytest collects `test_*.py` files only
    assert lines(SCRIPT, "TL303") == [8]
    assert lines(SCRIPT.replace("test_net", "detect_all"), "TL303") == [8]


def test_a_pytest_test_in_a_test_file_is_not_evaluation_code():
    from tests.helpers import lint

    assert [d.line for d in lint(SCRIPT, "TL303", name="eval.py")] == [8]
    assert lint(SCRIPT, "TL303", name="tests/test_detector.py") == []


def test_a_helper_called_under_no_grad_after_the_switch_is_fine():
    guarded = SCRIPT.replace('    test_net("out", net, dataset)', '    with torch.no_grad():\n        test_net("out", net, dataset)')
    assert lines(guarded, "TL303") == []


def test_one_forward_of_a_module_the_function_switched_to_eval():
    """`predict_snli`: `net.eval()` then one forward outside no_grad (no loop needed: the module was
    switched for this very forward)."""
    code = """
    import torch

    def predict_snli(net, vocab, premise, hypothesis):
        net.eval()
        premise = torch.tensor(vocab[premise])
        label = torch.argmax(net([premise.reshape((1, -1)), hypothesis]), dim=1)
        return label
    """
    assert lines(code, "TL303") == [7]
    assert lines(code.replace("def predict_snli(net", "@torch.no_grad()\n    def predict_snli(net"), "TL303") == []


def test_a_module_frozen_in_the_same_chain_records_no_graph():
    """`sampler.eval().requires_grad_(False).to(device)` (metric samplers): no graph to record."""
    code = """
    import torch

    def compute_metric(sampler, batches, device):
        sampler.eval().requires_grad_(False).to(device)
        dist = []
        for c in batches:
            dist.append(sampler(c))
        return dist
    """
    assert lines(code, "TL303") == []
    assert lines(code.replace(".requires_grad_(False)", ""), "TL303") == [8]


EVALUATOR = """
import torch
from transformers import Trainer


class COCOEvaluator:
    def evaluate(self, model, test_size):
        model = model.eval()
        x = torch.ones(1, 3, test_size[0], test_size[1]).cuda()
        model(x)
        with torch.no_grad():
            for imgs in self.dataloader:
                outputs = model(imgs.cuda())
"""


def test_a_method_named_like_a_library_hook_in_a_class_of_no_library_is_evaluation_code():
    """`COCOEvaluator.evaluate` (YOLOX): its warm-up forward after `model.eval()` records a graph; only a
    Trainer's `evaluate`, which the library runs without grad, is exempt, known from the class's bases."""
    assert lines(EVALUATOR, "TL303") == [10]
    assert lines(EVALUATOR.replace("class COCOEvaluator:", "class COCOEvaluator(Trainer):"), "TL303") == []


def test_a_lightning_validation_step_is_run_without_grad_by_lightning():
    code = """
    import lightning as L

    class LitModel(L.LightningModule):
        def validation_step(self, batch, batch_idx):
            self.backbone.eval()
            for x in batch:
                self.backbone(x)
    """
    assert lines(code, "TL303") == []
    assert lines(code.replace("(L.LightningModule)", "(object)"), "TL303") == [8]


# d2l's prediction helpers: a module (by its value) run outside no_grad by a function that gives back
# only labels, strings or numbers; nothing it returns or keeps can reach a backward
PREDICTIONS = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


def predict_sentiment(net: Net, sequence):
    label = torch.argmax(net(sequence.reshape(1, -1)), dim=1)
    return "positive" if label == 1 else "negative"


def features(net: Net, x):
    return net(x)


def collect(net: Net, x, out):
    out.append(net(x))
    return len(out)


def cache(self, net: Net, x):
    self.last = net(x)
    return self.last.argmax(1)


@torch.no_grad()
def predict_quietly(net: Net, x):
    return net(x).argmax(1)


def train_step(net: Net, x, y, opt):
    loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    return loss.argmax()
"""


def test_a_helper_that_returns_only_predictions_runs_its_forward_for_nothing():
    # `features` returns the graph, `collect` and `cache` keep it, `predict_quietly` records none,
    # `train_step` backpropagates: only `predict_sentiment` holds a graph nobody can use
    assert lines(PREDICTIONS, "TL303") == [16]


# cifar10-fast's step lists: `reduce` runs each step function over the batches; the training call's
# steps include a backward, the validation call's share the forward and have none
STEP_LISTS = """
import torch

MODEL, OUTPUT = "model", "output"


def reduce(batches, state, steps):
    for batch in batches:
        for step in steps:
            updates = step(batch, state)
            if updates:
                state.update(updates)
    return state


def forward(training_mode):
    def step(batch, state):
        model = state[MODEL]
        if model.training != training_mode:
            model.train(training_mode)
        return {OUTPUT: model(batch)}
    return step


def backward():
    def step(batch, state):
        state[MODEL].zero_grad()
        state[OUTPUT]["loss"].sum().backward()
    return step


def log_loss(batch, state):
    state.setdefault("losses", []).append(state[OUTPUT]["loss"].detach())


def opt_step(batch, state):
    state["opt"].step()


train_steps = (forward(training_mode=True), log_loss, backward(), opt_step)
valid_steps = (forward(training_mode=False), log_loss)


def train_epoch(state, train_batches, valid_batches, train_steps=train_steps, valid_steps=valid_steps):
    reduce(train_batches, state, train_steps)
    reduce(valid_batches, state, valid_steps)
    return state
"""


def test_a_validation_call_of_a_step_list_shares_the_training_forward_without_a_backward():
    assert lines(STEP_LISTS, "TL303") == [46]


def test_the_validation_call_under_no_grad_is_fine():
    quiet = STEP_LISTS.replace(
        "    reduce(valid_batches, state, valid_steps)\n",
        "    with torch.no_grad():\n        reduce(valid_batches, state, valid_steps)\n",
    )
    assert lines(quiet, "TL303") == []


def test_validation_steps_sharing_only_a_logger_with_training_are_not_judged_by_it():
    # the validation forward is its own, under no_grad inside: the shared step runs no module
    own = STEP_LISTS.replace(
        "valid_steps = (forward(training_mode=False), log_loss)",
        "def evaluate(batch, state):\n    with torch.no_grad():\n        return {OUTPUT: state[MODEL](batch)}\n\n\nvalid_steps = (evaluate, log_loss)",
    )
    assert lines(own, "TL303") == []


# d2l's `save_hyperparameters()`: it reads its caller's frame and sets each argument as an attribute,
# so `self.rnn` is the GRU the constructor is given
SAVED_ARGUMENTS = """
import inspect
import torch
from torch import nn


class HyperParameters:
    def save_hyperparameters(self, ignore=[]):  # (a stub the chapter replaces below, as d2l's does)
        raise NotImplemented

    def save_hyperparameters(self, ignore=[]):
        frame = inspect.currentframe().f_back
        _, _, _, local_vars = inspect.getargvalues(frame)
        self.hparams = {k: v for k, v in local_vars.items() if k not in set(ignore + ["self"])}
        for k, v in self.hparams.items():
            setattr(self, k, v)


class LanguageModel(nn.Module, HyperParameters):
    def __init__(self, rnn, vocab):
        super().__init__()
        self.save_hyperparameters()

    def predict(self, prefix, num_preds):
        outputs, state = [self.vocab[prefix[0]]], None
        for _ in range(num_preds):
            X = torch.tensor([[outputs[-1]]])
            Y, state = self.rnn(X, state)
            outputs.append(int(Y.argmax()))
        return "".join(self.vocab.idx_to_token[i] for i in outputs)


model = LanguageModel(nn.GRU(4, 8), vocab)
print(model.predict("it has", 20))
"""


def test_an_argument_a_constructor_saves_by_reading_its_frame_is_the_attribute():
    assert lines(SAVED_ARGUMENTS, "TL303") == [28]


def test_hyperparameters_kept_in_a_dict_set_no_attribute():
    # Lightning's way: `self.hparams` only; what `self.rnn` is, nothing says
    kept = SAVED_ARGUMENTS.replace("        for k, v in self.hparams.items():\n            setattr(self, k, v)\n", "")
    assert lines(kept, "TL303") == []


# greedy decoding in a base class whose decoder a subclass hands over through `super().__init__`;
# scheduled sampling feeds the `argmax` back too, but backpropagates the loss it sums
DECODING = """
import torch
from torch import nn


class Decoder(nn.Module):
    def forward(self, X, state):
        return X, state


class EncoderDecoder(nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder

    def predict_step(self, bos, state, num_steps):
        outputs = [bos]
        for _ in range(num_steps):
            Y, state = self.decoder(outputs[-1], state)
            outputs.append(Y.argmax(2))
        return torch.cat(outputs[1:], 1)

    def scheduled_sampling_step(self, bos, state, targets, optimizer):
        X, loss = bos, 0.0
        for target in targets:
            Y, state = self.decoder(X, state)
            loss = loss + nn.functional.cross_entropy(Y, target)
            X = Y.argmax(2)
        loss.backward()
        optimizer.step()


class Seq2Seq(EncoderDecoder):
    def __init__(self, decoder, lr):
        super().__init__(decoder)
        self.lr = lr


model = Seq2Seq(Decoder(), lr=0.1)
"""


def test_a_greedy_decoder_records_a_graph_through_the_argmax_it_feeds_back():
    assert lines(DECODING, "TL303") == [19]


def test_a_greedy_decoder_under_no_grad_records_none():
    quiet = DECODING.replace("    def predict_step", "    @torch.no_grad()\n    def predict_step")
    assert lines(quiet, "TL303") == []


def test_a_decoder_the_constructor_is_not_handed_through_super_is_not_known_as_a_module():
    assert lines(DECODING.replace("super().__init__(decoder)", "super().__init__(None)"), "TL303") == []


# RL's action helpers: TD3's `select_action` (a policy holding its actor) and a DQN module's own `act`,
# each run every step of the loop that steps the environment with the action it returns
ACTING = """
import random
import numpy as np
import torch
import torch.nn as nn


class DQN(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Linear(4, 2)

    def forward(self, x):
        return self.layers(x)

    def act(self, state, epsilon):
        if random.random() > epsilon:
            q_value = self.forward(torch.FloatTensor(state).unsqueeze(0).cuda())
            return q_value.max(1)[1].item()
        return random.randrange(2)


class TD3:
    def __init__(self):
        self.actor = nn.Linear(4, 1).cuda()

    def select_action(self, state):
        state = torch.FloatTensor(state.reshape(1, -1)).cuda()
        return self.actor(state).cpu().data.numpy().flatten()


def train(env, dqn, policy, optimizer):
    state = env.reset()
    for t in range(100000):
        action = dqn.act(state, 0.1) if t % 2 else policy.select_action(np.array(state))
        state, reward, done, _ = env.step(action)
        loss = td_loss(dqn, policy)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_an_action_helper_run_every_step_records_a_graph_no_backward_reaches():
    assert lines(ACTING, "TL303") == [18, 29]


def test_an_action_helper_under_no_grad_or_giving_back_what_trains_records_nothing():
    # near misses: the helpers decorated with no_grad; a step helper returning the differentiable Q-values
    guarded = ACTING.replace("    def act(", "    @torch.no_grad()\n    def act(").replace("    def select_action(", "    @torch.no_grad()\n    def select_action(")
    assert lines(guarded, "TL303") == []
    differentiable = ACTING.replace("return q_value.max(1)[1].item()", "return q_value").replace(
        "return self.actor(state).cpu().data.numpy().flatten()", "return self.actor(state)")
    assert lines(differentiable, "TL303") == []


def test_an_action_helper_counting_its_calls_still_keeps_no_graph():
    # TD3's `choose_action` counts the steps it acted (`self.time_step += 1`): a number kept on the agent,
    # no graph; near miss: a helper keeping its output on the agent (`self.last = out`) keeps the graph
    counting = ACTING.replace("        return self.actor(state).cpu().data.numpy().flatten()",
                              "        self.time_step += 1\n        self.noise = max(0.1, self.noise * 0.99)\n        return self.actor(state).cpu().data.numpy().flatten()")
    assert lines(counting, "TL303") == [18, 31]
    keeping = ACTING.replace("        return self.actor(state).cpu().data.numpy().flatten()",
                             "        self.last = self.actor(state)\n        return self.last.cpu().data.numpy().flatten()")
    assert lines(keeping, "TL303") == [18]
    # nor one handing its output to an object it holds, or differentiating it (in a function nested in it)
    handed = ACTING.replace("        return self.actor(state).cpu().data.numpy().flatten()",
                            "        out = self.actor(state)\n        self.memory.store(out)\n        return out.cpu().data.numpy().flatten()")
    assert lines(handed, "TL303") == [18]
    differentiated = ACTING.replace("        return self.actor(state).cpu().data.numpy().flatten()", (
        "        def hvp(y, w):\n            return torch.autograd.grad(y, w, create_graph=True)[0]\n"
        "        out = self.actor(state)\n        h = hvp(out.sum(), self.actor.weight)\n        return h.detach().cpu().numpy()"))
    assert lines(differentiated, "TL303") == [18]


SAMPLING_POLICY = """
import torch
import torch.nn as nn


class GaussianPolicy(nn.Module):
    def __init__(self, n, a):
        super().__init__()
        self.linear = nn.Linear(n, a)

    def forward(self, state):
        return self.linear(state)

    def sample(self, state):
        mean = self.forward(state)
        return mean, mean.exp(), torch.tanh(mean)


class SAC(object):
    def __init__(self, n, a):
        self.policy = GaussianPolicy(n, a).cuda()
        self.policy_optim = torch.optim.Adam(self.policy.parameters(), lr=1e-3)

    def select_action(self, state):
        state = torch.FloatTensor(state).cuda().unsqueeze(0)
        action, _, _ = self.policy.sample(state)
        return action.detach().cpu().numpy()[0]

    def update(self, state):
        _, log_pi, _ = self.policy.sample(state)
        loss = log_pi.mean()
        self.policy_optim.zero_grad()
        loss.backward()
        self.policy_optim.step()
"""


def test_a_policys_own_sample_method_runs_its_layers():
    """pytorch-soft-actor-critic's `select_action`: the policy's own `sample` (a method of the module's
    class, giving back a tuple of what its layers compute) records a graph for an action handed back as
    a host array; a module's `sample` of a library stays graphless. The file holds no loop: a helper
    returning predictions needs none. Near misses: under no_grad, and the update that backpropagates."""
    assert lines(SAMPLING_POLICY, "TL303") == [26]
    assert lines(SAMPLING_POLICY.replace("    def select_action(", "    @torch.no_grad()\n    def select_action("), "TL303") == []


def test_a_policy_class_of_another_module_runs_its_layers_in_its_own_sample(tmp_path: Path) -> None:
    """The same `select_action` with the policies in `model.py` (`from model import GaussianPolicy,
    DeterministicPolicy`): each one's `sample` calls its `forward`, so the call runs the module. Near
    miss: a `sample` that only draws noise (`torch.randn`) runs no layer."""
    policies = SAMPLING_POLICY[: SAMPLING_POLICY.index("class SAC(object):")] + (
        "class DeterministicPolicy(GaussianPolicy):\n"
        "    def sample(self, state):\n"
        "        mean = self.forward(state)\n"
        "        return mean, torch.tensor(0.), mean\n"
    )
    agent = "import torch\nfrom model import GaussianPolicy, DeterministicPolicy\n\n\n" + SAMPLING_POLICY[SAMPLING_POLICY.index("class SAC(object):"):].replace(
        "        self.policy = GaussianPolicy(n, a).cuda()",
        "        if n:\n            self.policy = GaussianPolicy(n, a).cuda()\n        else:\n            self.policy = DeterministicPolicy(n, a).cuda()",
    )
    assert lint_project(tmp_path, {"model.py": policies, "sac.py": agent}, "TL303") == ["sac.py:15:TL303"]
    noise = policies.replace("        mean = self.forward(state)\n        return mean, mean.exp()", "        mean = torch.randn(3)\n        return mean, mean.exp()").replace(
        "        mean = self.forward(state)\n        return mean, torch.tensor(0.), mean", "        mean = torch.randn(3)\n        return mean, torch.tensor(0.), mean")
    assert lint_project(tmp_path, {"model.py": noise, "sac.py": agent}, "TL303") == []


def test_a_modules_own_forward_is_no_prediction_helper():
    """PlaNet's planner: an `nn.Module` whose `forward` runs the transition model in a loop and hands back
    the action mean that `topk` picked; VAR's quantizer feeds back what `argmin` picks. Whether their graphs
    are recorded is their callers' matter (`with torch.no_grad(): action = planner(belief, state)`)."""
    code = """
    import torch
    from torch import nn

    class MPCPlanner(nn.Module):
        def __init__(self, transition_model, reward_model):
            super().__init__()
            self.transition_model, self.reward_model = transition_model, reward_model
            self.score = nn.Linear(8, 1)

        def forward(self, belief, state):
            action_mean = torch.zeros(12, 1, device=belief.device)
            for _ in range(10):
                actions = action_mean + torch.randn(12, 100, device=belief.device)
                returns = self.score(self.transition_model(state, actions, belief)).sum(dim=0)
                _, topk = returns.topk(10)
                action_mean = actions[:, topk].mean(dim=1, keepdim=True)
            return action_mean[0]
    """
    assert lines(code, "TL303") == []


GLOBAL_MODEL = """
import torch
from torch import nn

_model = None


class SpeakerEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.Linear(40, 256)

    def forward(self, frames):
        return self.lstm(frames)


def load_model(path):
    global _model
    _model = SpeakerEncoder().cuda()
    _model.load_state_dict(torch.load(path))
    _model.eval()


def embed_frames_batch(frames_batch):
    frames = torch.from_numpy(frames_batch).cuda()
    return _model.forward(frames).detach().cpu().numpy()
"""


def test_a_module_a_loader_binds_to_a_global_is_the_globals_value():
    """Real-Time-Voice-Cloning's encoder inference: `_model = None` at the top, bound by `load_model`'s
    `global _model` to the encoder it switches to eval; `embed_frames_batch` runs it and gives back a host
    array. Near miss: without the `global` statement the loader binds a local and `_model` stays None."""
    assert lines(GLOBAL_MODEL, "TL303") == [26]
    assert lines(GLOBAL_MODEL.replace("    global _model\n", ""), "TL303") == []


def test_a_loss_module_given_an_output_made_under_no_grad_records_nothing():
    # WideResNet's `validate`: `with torch.no_grad(): output = model(input)`, then `loss = criterion(output,
    # target)` outside it; the loss has no parameters and its input no graph. Near miss: a loss module that
    # learns (a project module with parameters) or an output made with autograd on
    code = """
    import torch
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss().cuda()

    def validate(val_loader, model):
        model.eval()
        for i, (input, target) in enumerate(val_loader):
            with torch.no_grad():
                output = model(input.cuda())
            loss = criterion(output, target.cuda())
            print(loss.item())
    """
    assert lines(code, "TL303") == []
    assert lines(code.replace("            with torch.no_grad():\n                output", "            if True:\n                output"), "TL303") == [11]


# the script's top level (a notebook's cells joined) is evaluation code too
TOP_LEVEL = """
import torch
model = torch.nn.Linear(4, 2).cuda()
model.load_state_dict(torch.load("model.pt"))
model.eval()
for x in loader:
    print(model(x.cuda()).argmax(1))
"""


def test_a_test_loop_at_the_scripts_top_level_is_evaluation():
    assert lines(TOP_LEVEL, "TL303") == [7]


def test_the_scripts_top_level_near_misses():
    # under no_grad, or with autograd switched off, or the model frozen
    assert lines(TOP_LEVEL.replace("for x in loader:\n    print", "with torch.no_grad():\n  for x in loader:\n    print"), "TL303") == []
    assert lines(TOP_LEVEL.replace("model.eval()\n", "model.eval()\ntorch.set_grad_enabled(False)\n"), "TL303") == []
    assert lines(TOP_LEVEL.replace("model.eval()\n", "model.eval()\nmodel.requires_grad_(False)\n"), "TL303") == []
    # switched back to training mode before the loop
    assert lines(TOP_LEVEL.replace("model.eval()\n", "model.eval()\nmodel.train()\n"), "TL303") == []
    # one forward outside any loop: a model file's self-check, a notebook showing an output
    assert lines(TOP_LEVEL.replace("for x in loader:\n    print(model(x.cuda()).argmax(1))", "print(model(torch.rand(1, 4).cuda()).shape)"), "TL303") == []
    # a loop that backpropagates through the eval-mode model: fine-tuning with frozen statistics
    tuned = TOP_LEVEL.replace("    print(model(x.cuda()).argmax(1))", "    loss = model(x.cuda()).sum()\n    loss.backward()\n    opt.step()")
    assert lines(tuned, "TL303") == []


# prediction helpers: a generator's samples copied into a list of host arrays, a speaker encoder run by
# name (`_model.forward(frames)`) whose embedding is copied to the host
SAMPLES = """
import torch
from torch import nn

encoder = nn.Linear(4, 4).cuda()
encoder.eval()


class GAN:
    def __init__(self):
        self.G = nn.Sequential(nn.Linear(4, 4)).cuda()

    def generate_img(self, z, n):
        samples = self.G(z).data.cpu().numpy()[:n]
        images = []
        for sample in samples:
            images.append({kept})
        return images


def embed_frames(frames):
    return encoder.forward(torch.from_numpy(frames).cuda()).detach().cpu().numpy()
"""


def test_a_helper_returning_a_list_of_host_arrays_or_running_forward_by_name_records_a_graph():
    assert lines(SAMPLES.format(kept="sample.reshape(2, 2)"), "TL303") == [14, 22]


def test_a_helper_returning_a_list_of_what_the_module_computes_records_nothing():
    # near miss: the list holds the generator's outputs themselves, which a caller may backpropagate
    code = SAMPLES.format(kept="sample").replace("samples = self.G(z).data.cpu().numpy()[:n]", "samples = self.G(z)[:n]")
    assert lines(code, "TL303") == [22]


GRAD_OFF_SCRIPT = """
import torch

model = torch.load("model.pt").cuda()
{switch}


def get_scores(loader):
    model.eval()
    scores = []
    for x in loader:
        scores.append(model(x.cuda()).max(1)[0].cpu().numpy())
    return scores
"""


def test_a_script_that_turns_autograd_off_at_its_top_level_records_no_graph():
    # Outlier Exposure's OOD evaluation scripts: `torch.set_grad_enabled(False)` once, before anything runs
    assert lines(GRAD_OFF_SCRIPT.format(switch="torch.set_grad_enabled(False)"), "TL303") == []


def test_autograd_turned_off_under_a_test_or_on_again_still_records_a_graph():
    # near misses: off only when a flag says so, or enabled again somewhere in the module
    assert lines(GRAD_OFF_SCRIPT.format(switch="if args.fast:\n    torch.set_grad_enabled(False)"), "TL303") == [13]
    assert lines(GRAD_OFF_SCRIPT.format(switch="torch.set_grad_enabled(False)\ntorch.set_grad_enabled(True)"), "TL303") == [13]


CONTEXT_HELPER = """
import contextlib
import torch


def _get_no_grad_ctx_mgr():
    if float(torch.__version__[0:3]) >= 0.4:
        return torch.no_grad()
    return contextlib.suppress()


def evaluate(model, loader):
    model.eval()
    total = 0
    with _get_no_grad_ctx_mgr():
        for x, y in loader:
            out = model(x.cuda())
            total += (out.argmax(1) == y.cuda()).sum()
    return total


def train(model, loader, optimizer):
    for epoch in range(10):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
        evaluate(model, val_loader)
"""


def test_a_helper_of_the_module_returning_no_grad_turns_autograd_off():
    assert lines(CONTEXT_HELPER, "TL303") == []


def test_a_helper_returning_another_context_or_one_that_may_record_does_not():
    assert lines(CONTEXT_HELPER.replace("return torch.no_grad()", "return torch.enable_grad()"), "TL303") == [17]
    # a context that records a graph on one of its paths
    assert lines(CONTEXT_HELPER.replace("return contextlib.suppress()", "return torch.enable_grad()"), "TL303") == [17]
    # the helper given arguments: what it returns may depend on them, unread
    given = CONTEXT_HELPER.replace("_get_no_grad_ctx_mgr():\n    if", "_get_no_grad_ctx_mgr(flag):\n    if").replace(
        "with _get_no_grad_ctx_mgr():", "with _get_no_grad_ctx_mgr(True):"
    )
    assert lines(given, "TL303") == [17]


def test_a_forward_whose_graph_a_method_differentiates_is_no_evaluation():
    # FROMP's optimizer: it switches the model to eval mode, runs it on the memorable points and hands the
    # loss to its own `cac_grad`, which calls `torch.autograd.grad`: the graph is used. Near miss: the
    # same loop keeping only the detached predictions records a graph for nothing
    code = """
    import torch


    class Fromp(torch.optim.Optimizer):
        def cac_grad(self, loss, params):
            return torch.autograd.grad(loss, params, retain_graph=True)

        def init_context(self, points):
            self.model.eval()
            kept = []
            for x in points:
                logits = self.model(x.cuda())
                kept.append(logits.detach())
                grad = self.cac_grad(logits.sum(), list(self.model.parameters()))
            self.model.train()
            return kept
    """
    assert lines(code, "TL303") == []
    assert lines(code.replace("                grad = self.cac_grad(logits.sum(), list(self.model.parameters()))\n", ""), "TL303") == [13]
    # FROMP's update_fisher: the jacobian helper differentiates through `cac_grad`, once per output
    jacobian = code.replace(
        "        def init_context(self, points):",
        "        def cac_jacobian(self, output, params):\n"
        "            return [self.cac_grad(output[:, i].sum(), params) for i in range(output.shape[1])]\n\n"
        "        def init_context(self, points):",
    ).replace("self.cac_grad(logits.sum(), list(self.model.parameters()))", "self.cac_jacobian(logits, list(self.model.parameters()))")
    assert "cac_jacobian(logits" in jacobian and lines(jacobian, "TL303") == []


LOG_PROB_EVALUATION = """
import torch

def evaluate(data_loader, lm_model, criterion):
    lm_model.eval()
    iterator = data_loader.get_tqdm()
    lm_model.init_hidden()
    total_loss = 0
    for {drawn} in {source}:
        output = lm_model.log_prob({given})
        total_loss += criterion(output, label_t.view(-1)).item()
    return total_loss
"""


def test_a_method_of_the_switched_module_given_what_the_loop_draws():
    # RAdam's language-model evaluation: the batches come from a project iterator, whose values the
    # analysis cannot name; each is what the loop draws, and the method runs the model on it
    code = LOG_PROB_EVALUATION.format(drawn="word_t, label_t", source="iterator", given="word_t")
    assert lines(code, "TL303") == [10]


def test_a_method_of_the_switched_module_given_the_loop_counter_is_no_forward():
    code = LOG_PROB_EVALUATION.format(drawn="n", source="range(4)", given="n")
    assert lines(code, "TL303") == []


def test_a_decoding_loop_is_reported_at_its_forward_not_at_the_function_making_its_next_input(tmp_path: Path):
    # a seq2seq `translate`: the next input is made by a function of another module (`str2tensor`),
    # which starts no graph; the forwards are where the evaluation records one: `translate` gives back
    # only strings, a prediction helper, reported once at its first forward (the encoder's)
    helpers = """
    import torch

    def str2tensor(msg):
        return torch.LongTensor([ord(c) for c in msg]).cuda()
    """
    code = """
    import torch
    from seq2seq_models import str2tensor

    encoder = torch.nn.GRU(8, 8).cuda()
    decoder = torch.nn.GRU(8, 8).cuda()

    def translate(enc_input, predict_len=100):
        encoder_outputs, hidden = encoder(str2tensor(enc_input))
        predicted = ""
        dec_input = str2tensor("<s>")
        for c in range(predict_len):
            output, hidden = decoder(dec_input, hidden)
            top_i = torch.multinomial(output.data.view(-1).exp(), 1)[0]
            predicted += chr(top_i)
            dec_input = str2tensor(chr(top_i))
        return enc_input, predicted

    def train(src, target, optimizer):
        output, hidden = decoder(str2tensor(src))
        loss = torch.nn.functional.mse_loss(output, str2tensor(target))
        loss.backward()
        optimizer.step()
        return loss.item()

    print(translate("hello"))
    """
    assert lint_project(tmp_path, {"seq2seq_models.py": helpers, "seq2seq.py": code}, "TL303") == ["seq2seq.py:9:TL303"]


# -- a method its module calls only under no_grad, called with grad from a script that imports it -----
GAN_TRAINER = """
import torch
import torch.nn as nn


class ACGAN(object):
    def __init__(self, args):
        self.G = nn.Linear(4, 4).cuda()
        self.D = nn.Linear(4, 1).cuda()
        self.G_optimizer = torch.optim.Adam(self.G.parameters())
        self.sample_z_ = torch.rand(8, 4).cuda()

    def train(self, loader):
        for epoch in range(10):
            self.G.train()
            for x_ in loader:
                self.G_optimizer.zero_grad()
                loss = self.D(self.G(x_.cuda())).mean()
                loss.backward()
                self.G_optimizer.step()
            with torch.no_grad():
                self.visualize_results(epoch + 1)

    def visualize_results(self, epoch):
        self.G.eval()
        samples = self.G(self.sample_z_)
        return samples.cpu().data.numpy()
"""
GAN_SCRIPT = """
import argparse
from ACGAN import ACGAN

def main():
    args = argparse.ArgumentParser().parse_args()
    gan = ACGAN(args)
    gan.train(loader)
    CALL
"""


def test_a_method_a_script_calls_with_grad_is_evaluation_with_grad(tmp_path: Path) -> None:
    # pytorch-generative-model-collections: `visualize_results` runs under no_grad inside `train`, and
    # with grad from main.py after training
    files = {"ACGAN.py": GAN_TRAINER, "main.py": GAN_SCRIPT.replace("CALL", "gan.visualize_results(args.epoch)")}
    assert lint_project(tmp_path, files, "TL303") == ["ACGAN.py:26:TL303"]


def test_a_method_every_module_calls_under_no_grad_is_not(tmp_path: Path) -> None:
    for call in ("with torch.no_grad():\n        gan.visualize_results(args.epoch)", "gan.save(args.epoch)", "pass"):
        files = {"ACGAN.py": GAN_TRAINER, "main.py": "import torch\n" + GAN_SCRIPT.replace("CALL", call)}
        assert lint_project(tmp_path, files, "TL303") == [], call


# a policy's greedy action, a prediction helper its own module never calls: the evaluation script of
# another module calls it under `@torch.no_grad()` (Lightning's PPO example), or with grad
AGENT = """
import torch
import torch.nn as nn


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.actor = nn.Linear(4, 2)

    def forward(self, obs):
        return self.actor(obs)

    def get_greedy_action(self, obs):
        probs = self.actor(obs).softmax(-1)
        return torch.argmax(probs, dim=-1)
"""
AGENT_TEST = """
import torch
from agent import Agent

DECORATOR
def test(agent, env):
    obs = env.reset()
    for _ in range(100):
        obs = env.step(agent.get_greedy_action(obs))
"""


def test_a_helper_other_modules_call_only_under_no_grad_records_nothing(tmp_path: Path) -> None:
    files = {"agent.py": AGENT, "utils.py": AGENT_TEST.replace("DECORATOR", "@torch.no_grad()")}
    assert lint_project(tmp_path, files, "TL303") == []


def test_a_helper_another_module_calls_with_grad_records_a_graph(tmp_path: Path) -> None:
    files = {"agent.py": AGENT, "utils.py": AGENT_TEST.replace("DECORATOR", "")}
    assert lint_project(tmp_path, files, "TL303") == ["agent.py:15:TL303"]


# Decision Transformer's `evaluate_episode(model, env)`, a function of its own module that runs the
# model over an episode after switching it to eval mode; its only caller, in another module, runs it
# under `with torch.no_grad():` (or, the near miss, does not)
EPISODES = """
import torch


def evaluate_episode(model, env, device):
    model.eval()
    state, total = env.reset(), 0.0
    for _ in range(1000):
        action = model.get_action(torch.as_tensor(state, device=device))
        state, reward, done, _ = env.step(action.detach().cpu().numpy())
        total += reward
        if done:
            break
    return total
"""
EXPERIMENT = """
import torch
from evaluate_episodes import evaluate_episode


def eval_episodes(model, env, device):
    returns = []
    for _ in range(10):
        CALL
    return returns
"""


def test_a_function_other_modules_call_only_under_no_grad_records_nothing(tmp_path: Path) -> None:
    quiet = "with torch.no_grad():\n            returns.append(evaluate_episode(model, env, device))"
    files = {"evaluate_episodes.py": EPISODES, "experiment.py": EXPERIMENT.replace("CALL", quiet)}
    assert lint_project(tmp_path, files, "TL303") == []
    files["experiment.py"] = EXPERIMENT.replace("CALL", "returns.append(evaluate_episode(model, env, device))")
    assert lint_project(tmp_path, files, "TL303") == ["evaluate_episodes.py:9:TL303"]


# a word-embedding notebook's similarity helper runs the trained model through a method of its own,
# `model.prediction(...)`, which returns what its embedding layer gives
SKIPGRAM = """
import torch
import torch.nn as nn


class Skipgram(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embedding_v = nn.Embedding(vocab_size, dim)
        self.embedding_u = nn.Embedding(vocab_size, dim)

    def forward(self, center, target):
        return (self.embedding_u(target) * self.embedding_v(center)).sum()

    def prediction(self, inputs):
        return self.embedding_v(inputs)

    def dimension(self, inputs):
        return self.embedding_v.embedding_dim


model = Skipgram(100, 30).cuda()
optimizer = torch.optim.Adam(model.parameters())
for center, target in loader:
    loss = model(center.cuda(), target.cuda())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def word_similarity(target, vocab):
    target_v = model.METHOD(prepare_word(target))
    similarities = []
    for word in vocab:
        vector = model.METHOD(prepare_word(word))
        similarities.append([word, torch.cosine_similarity(target_v, vector).item()])
    return sorted(similarities, key=lambda x: x[1], reverse=True)[:10]


print(word_similarity("king", vocab))
"""


def test_a_method_of_a_module_running_its_layers_is_a_forward_pass() -> None:
    assert lines(SKIPGRAM.replace("METHOD", "prediction"), "TL303") == [35]


def test_a_method_of_a_module_giving_no_graph_is_none() -> None:
    assert lines(SKIPGRAM.replace("METHOD", "dimension"), "TL303") == []
    assert lines(SKIPGRAM.replace("METHOD", "prediction").replace("def word_similarity", "@torch.no_grad()\ndef word_similarity"), "TL303") == []


# a character GPT's `generate`: each turn draws a token with `torch.multinomial` and feeds it back;
# its only call, after training, runs outside no_grad
GENERATE = """
import torch
from torch import nn
from torch.nn import functional as F


class GPT(nn.Module):
    def __init__(self, vocab, block_size):
        super().__init__()
        self.block_size = block_size
        self.head = nn.Embedding(vocab, vocab)

    def forward(self, idx):
        return self.head(idx)

    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.block_size:]
            logits = self(idx_cond)
            probs = F.softmax(logits[:, -1, :], dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def train(model, batches, optimizer):
    for x, y in batches:
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_sampling_loop_feeding_back_drawn_tokens_records_graphs_nobody_uses():
    assert lines(GENERATE, "TL303") == [19]


def test_a_module_whose_only_sign_is_the_token_it_draws_is_read():
    """char-rnn's `generate.py`: nothing in it switches a module, backpropagates or takes an `argmax`; the
    loop feeding back what `torch.multinomial` (or `topk`) draws is enough for the rule to read the module."""
    source = GENERATE[: GENERATE.index("\n\ndef train(")] + "\n"
    assert lines(source, "TL303") == [19]
    assert lines(source.replace("idx_next = torch.multinomial(probs, num_samples=1)", "_, idx_next = probs.topk(1)"), "TL303") == [19]


def test_a_sampler_returning_the_log_probabilities_of_its_tokens_leaves_them_to_a_caller():
    # self-critical training: the caller backpropagates through what the sampler returns
    source = GENERATE.replace("        return idx\n", "        return idx, probs.log()\n")
    assert lines(source, "TL303") == []
    kept = GENERATE.replace("        for _ in", "        logprobs = []\n        for _ in").replace(
        "            idx = torch.cat(", "            logprobs.append(probs.log())\n            idx = torch.cat("
    ).replace("        return idx\n", "        return idx, logprobs\n")
    assert lines(kept, "TL303") == []


def test_a_sampling_loop_under_no_grad_is_not_reported():
    source = GENERATE.replace("    def generate(", "    @torch.no_grad()\n    def generate(")
    assert lines(source, "TL303") == []


def test_a_sampler_writing_the_log_probabilities_into_a_buffer_it_returns_leaves_them_to_a_caller():
    # self-critical captioning's `_sample`: `seq_logprobs[:, t] = logprobs.gather(1, it)`, returned with `seq`
    source = GENERATE.replace("        for _ in", "        seq_logprobs = idx.new_zeros(idx.size(0), max_new_tokens)\n        for t, _ in enumerate(").replace(
        "range(max_new_tokens):", "range(max_new_tokens)):"
    ).replace(
        "            idx = torch.cat(", "            seq_logprobs[:, t] = probs.log().gather(1, idx_next).view(-1)\n            idx = torch.cat("
    ).replace("        return idx\n", "        return idx, seq_logprobs\n")
    assert "seq_logprobs[:, t] =" in source
    assert lines(source, "TL303") == []


# pytorch-playground's scripts: the epoch loop at the top level trains, then every few epochs
# switches the model to eval mode and runs the test set (inside `try:`, to save on Ctrl-C)
EPOCHS_AT_TOP_LEVEL = """
import torch
import torch.nn.functional as F

model = Net().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    for epoch in range(10):
        model.train()
        for data, target in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data.cuda()), target.cuda())
            loss.backward()
            optimizer.step()
        if epoch % 5 == 0:
            EVALUATE
            correct = 0
            for data, target in test_loader:
                output = model(data.cuda())
                correct += output.max(1)[1].eq(target.cuda()).sum()
except KeyboardInterrupt:
    pass
"""


@pytest.mark.parametrize("evaluate, found", [
    ("model.eval()", [19]),
    ("model.eval(); torch.set_grad_enabled(False)", []),
    ("model.train()", []),  # (no switch to eval: the near miss a switch-based rule must not report)
])
def test_an_evaluation_loop_inside_a_top_level_epoch_loop_that_trains_is_judged_on_its_own(evaluate: str, found: list[int]) -> None:
    assert lines(EPOCHS_AT_TOP_LEVEL.replace("EVALUATE", evaluate), "TL303") == found


def test_a_decoder_another_module_runs_only_inside_a_function_called_under_no_grad(tmp_path: Path):
    # the evaluator's `translate_all` calls `decoder.generate` outside any `with`, but every call of
    # `translate_all` is under `torch.no_grad()`: no graph is recorded (called from `score`, it is)
    models = """
    import torch
    from torch import nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 8)
            self.proj = nn.Linear(8, 100)

        def forward(self, tokens):
            return self.proj(self.embed(tokens))

        def generate(self, bos, max_len=20):
            tokens = [bos]
            for _ in range(max_len):
                scores = self.forward(tokens[-1])
                tokens.append(scores.argmax(-1))
            return torch.stack(tokens)
    """
    evaluator = """
    import torch
    from models import Decoder

    def translate_all(decoder, batches):
        return [decoder.generate(b) for b in batches]

    def evaluate(decoder, batches):
        with torch.no_grad():
            return translate_all(decoder, batches)

    def score(decoder, batches):
        return {call}(decoder, batches)
    """
    quiet = lint_project(tmp_path, {"models.py": models, "evaluator.py": evaluator.format(call="evaluate")}, "TL303")
    assert quiet == []
    graded = lint_project(tmp_path, {"models.py": models, "evaluator.py": evaluator.format(call="translate_all")}, "TL303")
    assert graded == ["models.py:17:TL303"]


# a decoder with a greedy decoding loop, as another module builds and evaluates it
DECODER = """
    import torch
    from torch import nn
    {imported}

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x):
            return self.proj(x)

        def generate(self, x, steps=20):
            outputs = []
            for _ in range(steps):
                x = self.forward(x)
                outputs.append(x.argmax(-1))
            return torch.stack(outputs)
    {more}"""


def test_a_decoder_method_run_by_a_module_that_does_not_import_its_module(tmp_path: Path):
    # the trainer builds the decoder and hands it to an evaluator that never imports `models`: the
    # evaluator's calls of `generate`, found by the method's name, say whether it runs with grad
    models = DECODER.format(imported="", more="")
    evaluator = """
    import torch

    class Evaluator:
        def __init__(self, decoder):
            self.decoder = decoder

        def run_all_evals(self, batches):
            {opening}
                return [self.decoder.generate(b) for b in batches]
    """
    trainer = """
    import torch
    from models import Decoder
    from evaluator import Evaluator

    def main(batches):
        decoder = Decoder().cuda()
        optimizer = torch.optim.Adam(decoder.parameters())
        for x, y in batches:
            loss = (decoder(x) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        Evaluator(decoder).run_all_evals(batches)
    """
    files = {"models.py": models, "trainer.py": trainer}
    quiet = lint_project(tmp_path, {**files, "evaluator.py": evaluator.format(opening="with torch.no_grad():")}, "TL303")
    assert quiet == []
    graded = lint_project(tmp_path, {**files, "evaluator.py": evaluator.format(opening="if True:")}, "TL303")
    assert graded == ["models.py:17:TL303"]
    # another class of the project defines `generate` too: an evaluator importing its module calls that one
    beams = """
    class BeamSearch:
        def generate(self, x):
            return x
    """
    quiet_evaluator = evaluator.format(opening="with torch.no_grad():")
    other = lint_project(tmp_path, {**files, "beams.py": beams, "evaluator.py": "from beams import BeamSearch\n" + textwrap.dedent(quiet_evaluator)}, "TL303")
    assert other == ["models.py:17:TL303"]
    # one that imports neither may be handed either: its quiet calls hold for both
    either = lint_project(tmp_path, {**files, "beams.py": beams, "evaluator.py": quiet_evaluator}, "TL303")
    assert either == []


def test_a_call_by_the_method_s_name_on_an_object_of_another_class_is_no_call_of_it(tmp_path: Path):
    # `searcher.generate(x)` in the decoder's own module runs the beam searcher's `generate`, not the
    # decoder's: the decoder's runs only where the evaluator calls it, under no_grad
    models = DECODER.format(imported="from beams import BeamSearch", more="""
        def generate_beam(self, x):
            searcher = {searcher}
            return searcher.generate(x)
    """)
    beams = """
    class BeamSearch:
        def __init__(self, model):
            self.model = model

        def generate(self, x):
            return self.model.forward(x)
    """
    evaluator = """
    import torch

    def evaluate(decoder, batches):
        with torch.no_grad():
            return [decoder.generate(b) for b in batches]
    """
    files = {"beams.py": beams, "evaluator.py": evaluator}
    assert lint_project(tmp_path, {**files, "models.py": models.format(searcher="BeamSearch(self)")}, "TL303") == []
    # handed in, of no known class, it may be a decoder: that call runs `generate` with grad
    assert lint_project(tmp_path, {**files, "models.py": models.format(searcher="self.searcher")}, "TL303") == ["models.py:17:TL303"]
