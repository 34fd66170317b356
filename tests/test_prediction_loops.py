"""TL303 on prediction loops without an eval switch: a periodic test inside a training loop, a test script
that reads predictions with `torch.max(out, 1)`; and the values that tell what such a loop keeps (a count
of numpy sums, `x.shape[0]`, a setting read from `parser.parse_args()`). Each with a near miss."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lines
from tests.test_device_values import found, lint_project

# a relation-network trainer: every 5000 episodes, a test loop inside the training loop runs both
# networks with autograd on and keeps only numbers
PERIODIC_TEST = """
import argparse
import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("-w", "--class_num", type=int, default=5)
args = parser.parse_args()
CLASS_NUM = args.class_num

def main(tasks, test_tasks):
    encoder, relation = torch.nn.Linear(8, 8).cuda(), torch.nn.Linear(8, 2).cuda()
    optim = torch.optim.Adam(list(encoder.parameters()) + list(relation.parameters()))
    for episode in range(500000):
        x, y = tasks.sample()
        loss = relation(encoder(x.cuda())).sum()
        optim.zero_grad()
        loss.backward()
        optim.step()
        if episode % 5000 == 0:
            accuracies = []
            for i in range(600):
                total_rewards, counter = 0, 0
                for images, labels in test_tasks.loader():
                    relations = relation(encoder(images.cuda()))
                    _, predicted = torch.max(relations.data, 1)
                    rewards = [1 if predicted[j] == labels[j] else 0 for j in range(labels.shape[0])]
                    total_rewards += np.sum(rewards)
                    counter += labels.shape[0]
                accuracies.append(total_rewards / 1.0 / counter / CLASS_NUM)
"""


def test_a_periodic_test_loop_in_the_training_loop_keeping_only_numbers():
    assert lines(PERIODIC_TEST, "TL303") == [25]


def test_a_periodic_test_loop_that_keeps_the_outputs_records_graphs_someone_may_use():
    keeping = PERIODIC_TEST.replace("accuracies.append(total_rewards / 1.0 / counter / CLASS_NUM)", "accuracies.append(relations)")
    assert lines(keeping, "TL303") == []


def test_a_test_loop_that_backpropagates_is_training():
    # fine-tuning on each test task's support set before scoring it (meta-learning): the loop trains
    adapting = PERIODIC_TEST.replace(
        "_, predicted = torch.max(relations.data, 1)", "relations.sum().backward()\n                    _, predicted = torch.max(relations.data, 1)"
    )
    assert lines(adapting, "TL303") == []


def test_a_count_of_numpy_sums_divided_by_a_setting_is_a_number():
    # (`total_rewards` joins 0 and numpy sums; `CLASS_NUM` is a command-line setting read at the top level)
    with_tensor_count = PERIODIC_TEST.replace("total_rewards += np.sum(rewards)", "total_rewards += relations.sum()")
    assert lines(with_tensor_count, "TL303") == []


# a test script: no `eval()`, no `argmax`, no backward; `torch.max(out, 1)` reads the predictions
TEST_SCRIPT = """
import numpy as np
import torch

def main(test_loader):
    encoder = torch.nn.Linear(8, 2).cuda()
    encoder.load_state_dict(torch.load("encoder.pt"))
    accuracies = []
    for images, labels in test_loader:
        out = encoder(images.cuda())
        _, predicted = torch.max(out.data, 1)
        accuracies.append(np.mean((predicted.cpu() == labels).numpy()))
    print(np.mean(accuracies))

if __name__ == "__main__":
    main(None)
"""


def test_a_test_script_reading_predictions_with_torch_max():
    assert lines(TEST_SCRIPT, "TL303") == [10]


def test_a_test_script_running_its_model_under_no_grad():
    guarded = TEST_SCRIPT.replace("        out = encoder(images.cuda())", "        with torch.no_grad():\n            out = encoder(images.cuda())")
    assert lines(guarded, "TL303") == []


def test_a_loss_of_outputs_made_under_no_grad_records_nothing():
    # a GLUE trainer's evaluation: the model runs under no_grad, the loss module (a focal loss of the
    # project or torch's cross-entropy) scores its logits outside it
    code = """
    import torch
    from torch.nn import CrossEntropyLoss
    from losses import FocalLoss

    def main(model, optimizer, train_loader, eval_loader, focal):
        for batch, labels in train_loader:
            model(batch, labels=labels).backward()
            optimizer.step()
        model.eval()
        eval_loss = 0
        for input_ids, label_ids in eval_loader:
            with torch.no_grad():
                logits = model(input_ids.cuda())
            loss_fct = FocalLoss(2) if focal else CrossEntropyLoss()
            tmp_eval_loss = loss_fct(logits.view(-1, 2), label_ids.cuda().view(-1))
            eval_loss += tmp_eval_loss.mean().item()
    """
    assert lines(code, "TL303") == []


def test_a_class_without_a_base_is_no_module_whatever_its_methods_are_named(tmp_path: Path):
    # diffusion_policy's RotationTransformer: a plain class whose `forward` converts numpy arrays
    rotation = """
    import numpy as np

    class RotationTransformer:
        def forward(self, x):
            return np.asarray(x) * 2
    """
    helper = """
    from rotation import RotationTransformer

    def convert(raw_actions, transformer):
        rot = transformer.forward(raw_actions[..., 3:6])
        return rot.argmax(-1)

    def load(data):
        return convert(data, RotationTransformer())
    """
    assert lint_project(tmp_path, {"rotation.py": rotation, "dataset.py": helper}, "TL303") == []
    module = rotation.replace("import numpy as np", "import numpy as np\n    import torch").replace("class RotationTransformer:", "class RotationTransformer(torch.nn.Linear):")
    assert lint_project(tmp_path, {"rotation.py": module, "dataset.py": helper}, "TL303") == ["dataset.py:5:TL303"]


# -- clip_grad_norm_ gives the total norm, a tensor where the gradients are ---------------------------
CLIPPED = """
import torch

def train(model, loader, optimizer, writer, device):
    model.to(device)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        writer.add_scalar("gradient norm", grad_norm, step)
"""


def test_the_norm_clip_grad_norm_returns_logged_every_step():
    assert found(CLIPPED, "TL401") == [12]


def test_the_norm_logged_every_hundred_steps():
    gated = CLIPPED.replace('        writer.add_scalar("gradient norm"', '        if step % 100 == 0:\n            writer.add_scalar("gradient norm"')
    assert found(gated, "TL401") == []


def test_a_logger_reading_what_it_is_given_only_when_a_caller_passes_a_step(tmp_path: Path):
    # VAR's TensorboardLogger.update: per iteration it reads every 500 steps; the unguarded read is in
    # the `else` of `if step is None:`, which only an epoch's caller (passing `step=`) takes
    logger = """
    class TensorboardLogger(object):
        def __init__(self, writer):
            self.writer = writer
            self.step = 0

        def update(self, head="scalar", step=None, **kwargs):
            for k, v in kwargs.items():
                if step is None:
                    it = self.step
                    if it == 0 or (it + 1) % 500 == 0:
                        self.writer.add_scalar(f"{head}/{k}", v.item(), it)
                else:
                    self.writer.add_scalar(f"{head}/{k}", v.item(), step)
    """
    train = """
    import torch
    from misc import TensorboardLogger

    def train(model, loader, optimizer, writer):
        tb = TensorboardLogger(writer)
        model.cuda()
        for x in loader:
            optimizer.zero_grad()
            model(x.cuda()).backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            tb.update(head="opt", grad_norm=grad_norm)
    """
    assert lint_project(tmp_path, {"misc.py": logger, "train.py": train}, "TL401") == []
    # near miss: the read on the path of a caller passing nothing (`if step is not None: ... else: read`)
    flipped = logger.replace("if step is None:", "if step is not None:")
    assert lint_project(tmp_path, {"misc.py": flipped, "train.py": train}, "TL401") == ["train.py:13:TL401"]
