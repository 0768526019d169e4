"""examples/train_digits.py: the first training step's loss and gradients against PyTorch.

Needs scikit-learn (the digits data) and torch; skipped cleanly without them.
"""
import importlib.util
import os

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _example():
    path = os.path.join(HERE, "..", "examples", "train_digits.py")
    spec = importlib.util.spec_from_file_location("train_digits", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_first_step_gradients_match_pytorch():
    pytest.importorskip("sklearn")
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    ex = _example()
    batch = 16
    step, logits_fn, _ = ex.build(batch, dtype="float64")
    params = ex.init_params(0, dtype="float64")
    xtr, ltr, _, _ = ex.load_data(0)
    xb, yb = xtr[:batch], ex.onehot(ltr[:batch])
    loss, grads = step(xb, yb, params)

    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    x = torch.tensor(xb)
    h = F.relu(F.conv2d(x, tp["conv_w"], tp["conv_b"], padding=1))
    h = F.max_pool2d(h, 2).flatten(1)
    logits = F.linear(h, tp["fc_w"], tp["fc_b"])
    tl = F.cross_entropy(logits, torch.tensor(ltr[:batch]))
    tl.backward()
    assert abs(loss - tl.item()) < 1e-12
    for k in ex.PARAMS:
        np.testing.assert_allclose(grads[k], tp[k].grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=k)
    np.testing.assert_allclose(logits_fn(xb, params), logits.detach().numpy(), rtol=1e-12)
