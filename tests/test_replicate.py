"""Replicated kernels (lowering/replicate.py) and the linearity test they use (analysis/linearity.py),
without MPI: which tasklets run on partial sums, and the bytes comm_report gives the causal model."""
import pytest

from distsdfg.analysis.linearity import tasklet_linear

LINEAR = [
    ("_o = _a", ["_a"], True),
    ("_o = _a + _b", ["_a", "_b"], True),
    ("_o = _a - _b", ["_a"], False),                      # _a - (a fixed _b): affine, not linear
    ("_o = -_a * _w", ["_a"], True),
    ("_o = _a / (_w + 1.0)", ["_a"], True),
    ("_o = _w / _a", ["_a"], False),
    ("_o = _a * _a", ["_a"], False),
    ("_o = _a + 1.0", ["_a"], False),
    ("_o = (dace.float32(0.0) if _m else _a)", ["_a"], True),   # the causal mask's where on a gradient
    ("_o = (_a if _a > 0 else 0.0)", ["_a"], False),            # the condition reads the input (ReLU)
    ("_o = (1.0 if _m else _a)", ["_a"], False),
    ("_t = _a * dace.float32(2.0)\n_o = _t + _b", ["_a", "_b"], True),
    ("_o = math.exp(_a)", ["_a"], False),
    ("_o = dace.float64(_a)", ["_a"], True),
]


@pytest.mark.parametrize("code, linear, expected", LINEAR)
def test_tasklet_linearity(code, linear, expected):
    assert tasklet_linear(code, linear, ["_o"]) is expected


def test_causal_model_moves_ddps_bytes():
    """The causal model (token and position embeddings, a causal mask buffer) under ZeRO-1 on 4
    ranks: the position and mask kernels run on every rank, the mask is owned whole by every rank,
    and the position gradient is reduce-scattered once: DDP's bytes plus the loss's sums."""
    torch = pytest.importorskip("torch")
    import distsdfg
    from distsdfg.frontend.torch_training import from_torch_train_step, zero_shardings
    from distsdfg.testing.torch_run import MODELS
    make, shape, classes = MODELS["causal"]
    model = make()
    gen = torch.Generator().manual_seed(1234)
    x = torch.randint(0, classes, shape, generator=gen)
    y = torch.randint(0, classes, (shape[0],), generator=gen)
    step = from_torch_train_step(model, torch.nn.CrossEntropyLoss(),
                                 torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), (x,), y)
    sdfg = step.sdfg
    sched = distsdfg.schedule_from_shardings(sdfg, zero_shardings(sdfg, {"x": (4, 1), "target": (4,)}, 4), nprocs=4)
    distsdfg.lower(sdfg, sched, placement="distributed")
    report = distsdfg.comm_report(sdfg, nprocs=4)
    params = sum(int(p.numel()) * p.element_size() for p in model.parameters())
    loss = sum(sum(s.total_sent) for s in report if s.collective == "Allreduce")
    assert loss == 72          # the loss's two one-element float64 sums
    assert sum(sum(s.total_sent) for s in report) - loss == 2 * 3 * params
    mask = distsdfg.layout(sdfg, "mask", nprocs=4)        # read only, by unsplit kernels: whole on every rank
    assert mask.placement == "distributed" and mask.blocks == (((0, 8), (0, 8)),) * 4, mask.blocks



def _map_kernel(code: str):
    """The one map kernel of ``B[i] = code`` over A (N) and D (N), built with DaCe's API."""
    import dace

    from distsdfg.analysis.kernels import find_kernels
    sdfg = dace.SDFG("linearity_" + str(abs(hash(code))))
    for name in "ADB":
        sdfg.add_array(name, ["N"], dace.float64)
    state = sdfg.add_state()
    state.add_mapped_tasklet("k", {"i": "0:N"}, {"_a": dace.Memlet("A[i]"), "_d": dace.Memlet("D[i]")},
                             f"_b = {code}", {"_b": dace.Memlet("B[i]")}, external_edges=True)
    (k,) = [k for k in find_kernels(sdfg) if k.kind == "map"]
    return k


@pytest.mark.parametrize("code, linear", [
    ("_a * _d", True),            # linear in A with D fixed
    ("_a + _d", False),           # on partial sums of A, D would be added once per rank
    ("_a * _a", False),
    ("math.exp(_a)", False),
])
def test_map_kernel_linearity_reads_the_tasklets_connectors(code, linear):
    """``kernel_linear`` judges each tasklet by the connectors its map feeds it (it once saw none of
    them and called every one-tasklet map linear: ``A + D`` run on partial sums of A, a wrong answer)."""
    from distsdfg.analysis.linearity import kernel_linear
    assert kernel_linear(_map_kernel(code), {"A"}) is linear
