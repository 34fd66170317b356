"""Tensors a step builds on the host and moves, in the spellings that hid them: new axes added to a
factory's tensor, indices NumPy draws from a count, a cast to another tensor's dtype before the move,
and the deprecated `torch.range`. Each beside the near miss that must stay silent (the batch's own rows,
a factory given `device=`, a cast that is the only conversion)."""

from __future__ import annotations

from tests.helpers import lines

# a contrastive loss masks the diagonal of a batch-by-batch score tensor: `[:, :, None, None]` adds
# axes to the host's identity matrix, it picks no rows of stored data
NEW_AXES = """
import torch
import torch.nn.functional as F


def infonce(scores, n):
    mask = torch.eye(n)[:, :, None, None].to(scores.device)
    return (scores * (1 - mask)).mean()


def train(model, loader, optimizer):
    for x in loader:
        x = x.cuda()
        loss = infonce(model(x), x.shape[0])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_new_axes_of_a_host_factory_are_no_rows_of_stored_data() -> None:
    assert lines(NEW_AXES, "TL406") == [7]


def test_the_same_mask_built_on_the_device_is_silent() -> None:
    code = NEW_AXES.replace("torch.eye(n)[:, :, None, None].to(scores.device)", "torch.eye(n, device=scores.device)[:, :, None, None]")
    assert lines(code, "TL406") == []


def test_rows_of_a_held_tensor_picked_by_an_index_stay_a_minibatch() -> None:
    code = NEW_AXES.replace("torch.eye(n)[:, :, None, None].to(scores.device)", "self_mask[idx].to(scores.device)")
    code = code.replace("def infonce(scores, n):", "def infonce(scores, n, self_mask=None, idx=None):")
    assert lines(code, "TL406") == []


# SentEval's probe: the minibatch indices are a permutation NumPy draws from the count of rows, sliced
# by the loop's index as a batch is, then copied to the device every step
PERMUTED_INDICES = """
import numpy as np
import torch
import torch.nn.functional as F


def fit(model, optimizer, X, y, batch_size):
    permutation = np.random.permutation(len(X))
    for i in range(0, len(X), batch_size):
        idx = torch.from_numpy(permutation[i:i + batch_size]).long().to(X.device)
        xb, yb = X.index_select(0, idx), y.index_select(0, idx)
        loss = F.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_indices_numpy_draws_from_a_count_are_built_on_the_host() -> None:
    assert lines(PERMUTED_INDICES, "TL406") == [10]


def test_rows_of_the_data_picked_by_those_indices_are_data() -> None:
    code = PERMUTED_INDICES.replace(
        "idx = torch.from_numpy(permutation[i:i + batch_size]).long().to(X.device)\n        xb, yb = X.index_select(0, idx), y.index_select(0, idx)",
        "xb = torch.from_numpy(X[permutation[i:i + batch_size]]).to('cuda')\n        yb = torch.from_numpy(y[permutation[i:i + batch_size]]).to('cuda')",
    )
    assert lines(code, "TL406") == []


# EfficientDet's focal loss: an image without boxes adds a zero loss, cast to the anchors' dtype and
# then copied to the device; a cast to `x.dtype` moves nothing, so the copy is `.cuda()`'s
ZERO_LOSS = """
import torch


class FocalLoss(torch.nn.Module):
    def forward(self, classifications, anchors, annotations):
        dtype = anchors.dtype
        losses = []
        for j in range(classifications.shape[0]):
            if annotations[j].shape[0] == 0:
                losses.append(torch.tensor(0).to(dtype).cuda())
                continue
            losses.append(classifications[j].sum())
        return torch.stack(losses).mean()


def train(model, loader, optimizer):
    criterion = FocalLoss()
    for imgs, annot in loader:
        classification, anchors = model(imgs.cuda())
        loss = criterion(classification, anchors, annot.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_cast_to_another_tensors_dtype_is_no_move() -> None:
    assert lines(ZERO_LOSS, "TL406") == [11]


def test_the_zero_built_where_the_anchors_are_is_silent() -> None:
    code = ZERO_LOSS.replace("torch.tensor(0).to(dtype).cuda()", "torch.tensor(0, dtype=dtype, device=anchors.device)")
    assert lines(code, "TL406") == []


# practical-pytorch's sequence mask: the deprecated `torch.range` builds on the host like `arange`
# (a device tensor as its bound is read back, the range is not built there)
SEQUENCE_MASK = """
import torch
from torch.autograd import Variable


def sequence_mask(sequence_length):
    max_len = sequence_length.data.max()
    batch_size = sequence_length.size(0)
    seq_range = torch.range(0, max_len - 1).long()
    seq_range_expand = seq_range.unsqueeze(0).expand(batch_size, max_len)
    seq_range_expand = Variable(seq_range_expand)
    if sequence_length.is_cuda:
        seq_range_expand = seq_range_expand.cuda()
    return seq_range_expand < sequence_length.unsqueeze(1).expand_as(seq_range_expand)


def train(model, loader, optimizer):
    for x, lengths in loader:
        mask = sequence_mask(lengths.cuda())
        loss = (model(x.cuda()) * mask).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_the_deprecated_range_is_a_host_factory() -> None:
    assert lines(SEQUENCE_MASK, "TL406") == [13]


def test_arange_given_the_device_is_silent() -> None:
    code = SEQUENCE_MASK.replace("torch.range(0, max_len - 1).long()", "torch.arange(max_len, device=sequence_length.device)")
    assert lines(code, "TL406") == []


# Pearl's bootstrapped DQN: each head's index, a count of `range`, wrapped and moved in the step
HEAD_INDEX = """
import torch


def learn(heads, optimizer, batch, ensemble_size):
    loss = torch.tensor(0.0, device=batch.device)
    for z in range(ensemble_size):
        z = torch.tensor(z).to(batch.device)
        loss = loss + heads(batch, z).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def train(heads, optimizer, loader):
    for batch in loader:
        learn(heads, optimizer, batch.cuda(), 10)
"""


def test_a_count_of_range_wrapped_and_moved_is_built_on_the_host() -> None:
    assert lines(HEAD_INDEX, "TL406") == [8]


def test_an_element_of_data_the_loop_draws_is_data() -> None:
    code = HEAD_INDEX.replace("for z in range(ensemble_size):", "for z in batch.rows:")
    assert lines(code, "TL406") == []


# mimicry's self-supervised rotation labels: each a NumPy array of a Python number the code chose,
# collected and concatenated, then copied to the images' device every step
ROTATION_LABELS = """
import numpy as np
import torch


def rotate_batch(images):
    n = images.shape[0]
    choices = [(i, i * 4 // n) for i in range(n)]
    rotated, labels = [], []
    for i in range(n):
        idx, rot_label = choices[i]
        rotated.append(torch.rot90(images[idx], rot_label, (1, 2)).unsqueeze(0))
        label = torch.from_numpy(np.array(rot_label))
        labels.append(torch.unsqueeze(label, 0))
    out = torch.cat(rotated, dim=0)
    return out, torch.cat(labels, dim=0).to(out.device)


def train(model, loader, optimizer):
    for x in loader:
        images, labels = rotate_batch(x.cuda())
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_an_array_of_a_number_the_code_chose_is_built_on_the_host() -> None:
    assert lines(ROTATION_LABELS, "TL406") == [16]


def test_an_array_of_the_batchs_own_labels_is_data() -> None:
    code = ROTATION_LABELS.replace("def rotate_batch(images):", "def rotate_batch(images, targets=None):").replace(
        "np.array(rot_label)", "np.array(targets[idx])"
    )
    assert lines(code, "TL406") == []


# LaViLa's fine-tuning maps each verb label through a table: the labels were read back from the
# device (`target.tolist()`), so the tensor built from them crosses to the device a second time
READ_BACK = """
import torch
import torch.nn.functional as F


def train(model, loader, optimizer, mapping):
    for images, target in loader:
        images, target = images.cuda(), target.cuda()
        output = model(images)
        verbs = torch.tensor([mapping[a] for a in target.tolist()]).cuda()
        loss = F.cross_entropy(output, verbs)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_values_read_back_from_the_device_and_moved_again_are_flagged() -> None:
    assert lines(READ_BACK, "TL406") == [10]


def test_the_loaders_own_labels_mapped_before_the_move_are_data() -> None:
    code = READ_BACK.replace("images, target = images.cuda(), target.cuda()", "images = images.cuda()")
    assert lines(code, "TL406") == []
