"""PyTorch frontend (hR): convolution, pooling, index reductions, scans, flips, norms, against PyTorch.

On one process: a float32 forward with one output per operator (relative error at most 1e-5),
three float64 SGD steps of a model that runs the backward of each (hT: grouped, depthwise, transposed and
one-channel convolutions, cumprod, prod with zeros, xlogy, gather), batch norm's running statistics
included (parameters, buffers and losses to 1e-10), and RMSprop and Adagrad (one program each). The data-parallel CNN on 4 ranks is in
``test_torch.py``'s GPT-input launch (``cnn:train-sgd:batch``).
"""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import distsdfg  # noqa: E402


def _rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


class Ops(nn.Module):
    OPS = ["conv2d_padded_strided", "conv1d_dilated", "conv2d_no_bias", "max_pool2d", "max_pool2d_padded",
           "avg_pool2d", "avg_pool2d_padded", "argmax", "argmax_all", "max_dim_values", "max_dim_indices",
           "min_dim_keepdim", "argmin", "cumsum_last", "cumsum_first", "prod", "prod_all", "flip", "roll", "roll_flat",
           "normalize", "norm_1", "norm_inf", "group_norm", "batch_norm_batch_stats",
           # hT: grouped / depthwise / transposed / 1x1 convolutions, cumprod, a product of one term, xlogy
           "conv2d_depthwise", "conv1d_grouped", "conv_transpose2d", "conv_transpose2d_grouped", "conv2d_1x1",
           "cumprod", "prod_of_one", "kl_div"]

    def __init__(self):
        super().__init__()
        self.c2 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.c1 = nn.Conv1d(3, 2, 3, dilation=2)
        self.c0 = nn.Conv2d(3, 2, (2, 3), padding=(0, 2), bias=False)
        self.gn = nn.GroupNorm(2, 4)
        with torch.no_grad():
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-0.5, 0.5)
        self.dw = nn.Conv2d(3, 6, 3, padding=1, stride=(1, 2), groups=3)          # two filters per channel
        self.g1 = nn.Conv1d(3, 6, 2, groups=3, dilation=3, bias=False)
        self.t2 = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)
        self.tg = nn.ConvTranspose2d(3, 6, (2, 3), stride=(2, 1), groups=3, dilation=(1, 2))
        self.p1 = nn.Conv2d(3, 1, 1)

    def forward(self, img, seq, a):
        vals, idx = a.max(dim=1)
        mins, _ = a.min(dim=0, keepdim=True)
        h = self.c2(img)
        return (h, self.c1(seq), self.c0(img), F.max_pool2d(img, 2), F.max_pool2d(img, 3, stride=2, padding=1),
                F.avg_pool2d(img, 2), F.avg_pool2d(img, 3, stride=2, padding=1), a.argmax(dim=1),
                a.argmax(), vals, idx, mins, a.argmin(dim=0), a.cumsum(dim=1), a.cumsum(dim=0),
                a.prod(dim=1, keepdim=True), (a * 0.5 + 1.0).prod(), a.flip(0, 1) * 1.0, a.roll(2, 1) * 1.0,
                a.roll(-3) * 1.0, F.normalize(a, dim=1), torch.linalg.vector_norm(a, 1, dim=0),
                torch.linalg.vector_norm(a, float("inf")), self.gn(h),
                F.batch_norm(h, None, None, self.gn.weight, self.gn.bias, training=True),
                self.dw(img), self.g1(seq), self.t2(img), self.tg(img), self.p1(img), a.cumprod(1),
                a[:, :1].prod(1), F.kl_div(F.log_softmax(a, 1), F.relu(a).softmax(0) * (a > 0), reduction="batchmean"))


def test_operators_match_pytorch():
    torch.manual_seed(5)
    module = Ops()
    g = torch.Generator().manual_seed(11)
    inputs = (torch.randn(2, 3, 7, 6, generator=g), torch.randn(2, 3, 11, generator=g), torch.randn(4, 6, generator=g))
    prog = distsdfg.from_torch(module, inputs)
    out = prog.sdfg(**prog.arguments(*inputs))
    ref = [t.detach().numpy() for t in module(*inputs)]
    errors = {}
    for op, got, want in zip(Ops.OPS, out, ref):
        got = np.asarray(got).reshape(want.shape)
        if want.dtype.kind in "iu":
            errors[op] = 0.0 if np.array_equal(got, want) else 1.0
        else:
            errors[op] = _rel(got, want)
    assert len(errors) == len(Ops.OPS)
    assert all(e <= 1e-5 for e in errors.values()), errors


class TrainNet(nn.Module):
    """Every backward of the operators above that a model trains through."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(2, 3, 3, padding=2, dilation=2)
        self.c2 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(4, 4, 2)
        self.gn = nn.GroupNorm(2, 4)
        self.bn = nn.BatchNorm2d(4)          # training mode: batch statistics, running statistics updated
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)                        # hT: depthwise
        self.tr = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.pw = nn.Conv2d(2, 1, 1)         # one output channel: its input gradient is an outer product
        self.fc = nn.Linear(12, 3)

    def forward(self, x, s):
        h = torch.relu(self.c2(x))
        u = self.pw(self.tr(torch.tanh(self.dw(h)))).mean((1, 2, 3))               # (N,)
        h = F.max_pool2d(self.gn(h), 3, stride=1, padding=1) + F.avg_pool2d(self.bn(h), 3, stride=1, padding=1)
        h = torch.relu(self.c3(h)).flip(3).roll(1, 2)                  # (N, 4, 3, 2)
        t = self.c1(s).cumsum(2)                                        # (N, 3, 9)
        z = torch.cat([h.mean((2, 3)), F.normalize(t.mean(2), dim=1) + t.amax(2).max(1, keepdim=True).values], 1)
        r = F.relu(t.mean(2))                                           # zeros: prod's and xlogy's zero cases
        c = torch.sigmoid(t.amin(2)).cumprod(1)[:, 1:]
        m = t.mean(2)
        g = torch.gather(m, 1, torch.stack([m.argmax(1), m.argmin(1)], 1))            # backward: scatter_add
        e = torch.cat([u[:, None] + g[:, :1] * g[:, 1:], c, (r.prod(1) + torch.xlogy(r, r).sum(1))[:, None]], 1)
        return self.fc(torch.cat([z, t.mean((1, 2))[:, None], e], 1)[:, :12])


def test_training_step_matches_pytorch_float64():
    torch.manual_seed(6)
    model = TrainNet().double()
    g = torch.Generator().manual_seed(12)
    x, s = torch.randn(3, 3, 8, 7, generator=g).double(), torch.randn(3, 2, 9, generator=g).double()
    y = torch.randint(0, 3, (3,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    prog = distsdfg.from_torch_train_step(model, nn.CrossEntropyLoss(), opt, (x, s), y)
    ref = copy.deepcopy(model)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    args = prog.arguments(x, s, y)
    for _ in range(3):
        loss = float(np.asarray(prog.sdfg(**args)).reshape(-1)[0])
        ropt.zero_grad()
        rl = nn.CrossEntropyLoss()(ref(x, s), y)
        rl.backward()
        ropt.step()
        assert abs(loss - rl.item()) <= 1e-10 * abs(rl.item())
    got = prog.state_dict(args)
    errs = {k: _rel(got[k].numpy(), v.detach().numpy()) for k, v in ref.state_dict().items()}
    moved = {k: _rel(got[k].numpy(), v.detach().numpy()) for k, v in model.state_dict().items()
             if k.startswith(("dw.", "tr."))}
    assert len(moved) == 4 and min(moved.values()) > 1e-6, moved       # the grouped weights were trained
    assert "bn.running_var" in errs and all(e <= 1e-10 for e in errs.values()), errs


@pytest.mark.parametrize("kind", ["rmsprop", "adagrad"])
def test_rmsprop_and_adagrad_match_pytorch(kind):
    """Three float64 steps of a two-layer MLP: parameters and the optimizer's state against PyTorch's."""
    torch.manual_seed(8)
    model = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    g = torch.Generator().manual_seed(13)
    x, y = torch.randn(4, 5, generator=g).double(), torch.randn(4, 3, generator=g).double()

    def make(params):
        if kind == "rmsprop":
            return torch.optim.RMSprop(params, lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.01)
        return torch.optim.Adagrad(params, lr=0.1, lr_decay=0.05, initial_accumulator_value=0.2, weight_decay=0.01)
    prog = distsdfg.from_torch_train_step(model, F.mse_loss, make(model.parameters()), (x,), y)
    ref = copy.deepcopy(model)
    ropt = make(ref.parameters())
    args = prog.arguments(x, y)
    for _ in range(3):
        prog.sdfg(**args)
        ropt.zero_grad()
        F.mse_loss(ref(x), y).backward()
        ropt.step()
    got, state = prog.state_dict(args), prog.optimizer_state(args)
    errs = {k: _rel(got[k].numpy(), v.detach().numpy()) for k, v in ref.named_parameters()}
    for k, p in ref.named_parameters():
        for st, want in ropt.state[p].items():
            if st != "step":
                errs[f"{k}:{st}"] = _rel(state[k][st].numpy(), want.numpy())
    assert len(errs) > 4 and all(e <= 1e-10 for e in errs.values()), errs


def test_one_channel_pool_backward_builds():
    """hT: the backward of a pool over a one-channel activation reads the gradient's plane of a
    ``(N, 1, H, W)`` array (``_w[p, q]``); DaCe 1.0.2's code generator dropped ``q`` there (it counts the
    indices against the array's leading dims, one of which is 1: "Invalid number of dimensions in
    expression") until ``dace_compat.tasklet_index``. One float64 SGD step against PyTorch."""
    torch.manual_seed(9)
    model = nn.Sequential(nn.Conv2d(2, 1, 1), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(4, 2)).double()
    g = torch.Generator().manual_seed(14)
    x, y = torch.randn(3, 2, 4, 4, generator=g).double(), torch.randint(0, 2, (3,), generator=g)
    prog = distsdfg.from_torch_train_step(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.5),
                                          (x,), y)
    ref = copy.deepcopy(model)
    args = prog.arguments(x, y)
    prog.sdfg(**args)
    nn.CrossEntropyLoss()(ref(x), y).backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= 0.5 * p.grad
    got = prog.state_dict(args)
    errs = {k: _rel(got[k].numpy(), v.detach().numpy()) for k, v in ref.state_dict().items()}
    assert len(errs) == 4 and all(e <= 1e-10 for e in errs.values()), errs
