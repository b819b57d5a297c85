"""Dropout in training steps: a counter-based generator (``distsdfg/frontend/torch_random.py``), seeded and
reproducible. Statistics of the generator against PyTorch's dropout (rate, independence across steps and
draws); a compiled step whose mask is exactly the generator's (PyTorch with that mask supplied gives the same
parameters, step after step) and whose ``p=0`` dropout is PyTorch's identity."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import distsdfg  # noqa: E402
from distsdfg.frontend.torch_random import uniform  # noqa: E402


def test_generator_statistics_match_pytorch_dropout():
    n, p = 200_000, 0.25
    keep = uniform(1234, 0, 1, n) < 1 - p
    torch.manual_seed(0)
    theirs = nn.functional.dropout(torch.ones(n), p, training=True)
    # the dropped fraction within 4 standard deviations of p, as PyTorch's
    sd = (p * (1 - p) / n) ** 0.5
    assert abs((1 - keep.mean()) - p) < 4 * sd and abs(float((theirs == 0).float().mean()) - p) < 4 * sd
    u = uniform(1234, 0, 1, n)
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(u.mean() - 0.5) < 4 * (1 / 12 / n) ** 0.5
    # other steps, draws and seeds give independent masks (agreement p^2 + (1-p)^2), the same ones the same
    for other in (uniform(1234, 1, 1, n), uniform(1234, 0, 2, n), uniform(99, 0, 1, n)):
        agree = ((other < 1 - p) == keep).mean()
        assert abs(agree - (p * p + (1 - p) ** 2)) < 0.01
    assert np.array_equal(uniform(1234, 0, 1, n), u)


class TwoDropouts(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop, self.lin1, self.none, self.lin2 = nn.Dropout(0.25), nn.Linear(16, 12), nn.Dropout(0.0), nn.Linear(12, 4)

    def forward(self, x):
        return self.lin2(self.none(torch.relu(self.lin1(self.drop(x)))))


def test_training_step_uses_the_generators_mask_and_p0_is_identity():
    torch.manual_seed(0)
    model = TwoDropouts().train()
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    step = distsdfg.from_torch_train_step(model, nn.functional.mse_loss, torch.optim.SGD(model.parameters(), lr=0.1),
                                          (x,), y)
    args = step.arguments(x, y)
    seed = int(args["rng_seed"][0])
    ref = TwoDropouts()
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for k in range(3):
        loss = float(np.asarray(step.sdfg(**args)).reshape(-1)[0])
        mask = torch.from_numpy((uniform(seed, k, 1, x.numel()) < np.float32(0.75)).reshape(x.shape)) / 0.75
        opt.zero_grad()
        h = ref.lin1(x * mask)          # the mask supplied; the p=0 dropout is the identity
        want = nn.functional.mse_loss(ref.lin2(torch.relu(h)), y)
        want.backward()
        opt.step()
        assert abs(loss - float(want)) <= 1e-5 * abs(float(want)), k
    got = step.state_dict(args)
    for name, v in ref.state_dict().items():
        assert np.abs(got[name].numpy() - v.numpy()).max() <= 1e-5 * max(np.abs(v.numpy()).max(), 1e-30), name
