"""PyTorch models as people load them: Hugging Face ``transformers`` GPT-2, BERT and Llama from tiny configs
(random weights, nothing downloaded), and the operators and forms they use, against PyTorch.

Single process: the forms (advanced indexing with several index tensors, ``F.pad``, a ``view`` of a
decomposed attention's output, ``torch.where`` with ``finfo.min``, a training step whose Python reads a
tensor's value) in one compiled program each; the three models translated (forward and training step,
masks on); their forwards compiled on one rank. mpiexec tier: GPT-2's forward and training step on 4 ranks,
data-parallel (``distsdfg/testing/hf_run.py``). Float32, relative error at most 1e-4.
"""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import distsdfg  # noqa: E402
from distsdfg.errors import TorchFrontendError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 1e-4


def _rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


class Forms(torch.nn.Module):
    """The indexing and masking forms of transformers' models, one output each."""
    OPS = ["index_two_adjacent", "index_broadcast_pair", "index_apart", "index_negative", "pad", "pad_crop",
           "sdpa_view", "where_finfo_min", "mask_from_index"]

    def forward(self, x, i, j, q, m):
        B, H, S, D = q.shape
        att = F.scaled_dot_product_attention(q, q * 0.5, q + 1.0)
        rows = torch.arange(S)
        allowed = (rows[None, :] <= rows[:, None])[None, None] & m[:, None, None, :].bool()
        return (x[:, i, j],                                   # (4, 3): index tensors side by side
                x[i[:, None], :, j[None, :]],                 # (3, 3, 5): apart, broadcast; their dims lead
                x[i, 1:, j],                                  # apart again, with a slice between
                x[:, -1, torch.tensor([-1, 0])],              # negative indices wrap
                F.pad(x, (1, 2), value=-100.0),
                F.pad(x, (0, -2, 1, 0)),                      # a negative pad crops
                att.transpose(1, 2).reshape(B, S, H * D).view(-1, H * D) * 1.0,   # GPT-2's view of sdpa's output
                torch.where(allowed, 0.0, torch.finfo(torch.float32).min) + 0.0,
                m[rows[None, :] * 0 + torch.arange(B)[:, None], rows[None, :]] * 2)


def _forms_inputs():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 6, 5, generator=g)
    i, j = torch.tensor([0, 3, 2]), torch.tensor([4, 1, 1])
    q = torch.randn(2, 2, 6, 4, generator=g)
    m = torch.ones(2, 6, dtype=torch.int64)
    m[1, 4:] = 0
    return x, i, j, q, m


@pytest.fixture(scope="module")
def forms():
    module = Forms()
    inputs = _forms_inputs()
    prog = distsdfg.from_torch(module, inputs)
    out = prog.sdfg(**prog.arguments(*inputs))
    return out, [t.detach().numpy() for t in module(*inputs)]


@pytest.mark.parametrize("index,op", list(enumerate(Forms.OPS)))
def test_form_matches_pytorch(forms, index, op):
    out, ref = forms
    assert _rel(out[index], ref[index]) <= 1e-5, op


class ReadsAValue(torch.nn.Module):
    """A model whose Python reads a tensor's value: a shortcut that an export skips, as transformers' mask
    builders do (``if mask.all()`` unless ``torch.compiler.is_exporting()``)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 3)

    def forward(self, x, mask):
        if not torch.compiler.is_exporting() and bool(mask.all()):
            return self.lin(x)
        return self.lin(x * mask[:, :, None])


class BranchesOnAValue(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 3)

    def forward(self, x):
        if self.lin(x).sum() > 0:      # truly data-dependent
            return self.lin(x)
        return -self.lin(x)


def test_training_step_whose_python_reads_a_value():
    torch.manual_seed(0)
    m = ReadsAValue()
    x, mask, y = torch.randn(2, 4, 6), torch.ones(2, 4), torch.randn(2, 4, 3)
    mask[1, 2:] = 0
    step = distsdfg.from_torch_train_step(m, F.mse_loss, torch.optim.SGD(m.parameters(), lr=0.1), (x, mask), y)
    args = step.arguments(x, mask, y)
    loss = step.sdfg(**args)
    ref = F.mse_loss(m(x, mask), y)
    ref.backward()
    torch.optim.SGD(m.parameters(), lr=0.1).step()
    assert abs(float(np.asarray(loss).reshape(-1)[0]) - float(ref)) <= 1e-5 * abs(float(ref))
    assert _rel(step.state_dict(args)["lin.weight"].numpy(), m.lin.weight.detach().numpy()) <= 1e-5


def test_training_step_that_branches_on_a_value_is_refused_naming_the_line():
    m = BranchesOnAValue()
    with pytest.raises(TorchFrontendError) as exc:
        distsdfg.from_torch_train_step(m, F.mse_loss, torch.optim.SGD(m.parameters(), lr=0.1),
                                       (torch.randn(2, 6),), torch.randn(2, 3))
    msg = str(exc.value)
    assert "reads a tensor's value" in msg and "test_torch_hf.py" in msg and "if self.lin(x).sum() > 0" in msg, msg


class ReadsAValueThenCummax(ReadsAValue):
    def forward(self, x, mask):
        return torch.cummax(super().forward(x, mask), dim=1)[0]


def test_operator_without_translation_after_the_export_names_the_models_line():
    m = ReadsAValueThenCummax()
    with pytest.raises(distsdfg.DistributedLoweringError) as exc:
        distsdfg.from_torch_train_step(m, F.mse_loss, torch.optim.SGD(m.parameters(), lr=0.1),
                                       (torch.randn(2, 4, 6), torch.ones(2, 4)), torch.randn(2, 4, 3))
    assert "aten.cummax" in str(exc.value) and "test_torch_hf.py" in str(exc.value), str(exc.value)
    assert "return torch.cummax(super().forward(x, mask), dim=1)[0]" in str(exc.value), str(exc.value)


# -- transformers -------------------------------------------------------------------------------

@pytest.mark.parametrize("name,mode,attn", [(n, m, a) for n in ("gpt2", "bert", "llama") for m, a in
                                            (("forward", "sdpa"), ("forward", "eager"), ("train", "sdpa"))])
def test_transformers_model_translates(name, mode, attn):
    pytest.importorskip("transformers")
    from distsdfg.testing.hf_run import program
    _, prog, args = program(name, mode, attn)
    assert len(distsdfg.maps(prog.sdfg)) > 20
    prog.arguments(*args)       # labels -100 where the mask pads: ignored by the loss, not an index out of range


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_transformers_forward_one_rank(name):
    pytest.importorskip("transformers")
    from mpi4py import MPI
    from distsdfg.testing.hf_run import run_case
    r = run_case(f"{name}:forward", MPI.COMM_SELF)
    assert r["rel_err"] <= TOL, r


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    pytest.importorskip("transformers")
    from distsdfg.testing.mpirun import launch_cases
    return launch_cases(4, ["gpt2:forward", "gpt2:train"], tmp_path_factory.mktemp("hf"),
                        module="distsdfg.testing.hf_run", timeout=3000)


@pytest.mark.parametrize("case", ["gpt2:forward", "gpt2:train"])
def test_transformers_four_ranks_match_pytorch(four_ranks, case):
    r = four_ranks[case]
    assert "error" not in r, r.get("trace", r)
    assert r["rel_err"] <= TOL, r
    if case.endswith("train"):
        assert r["loss_err"] <= TOL, r
