"""Checkpoints (``distsdfg/runtime/checkpoint.py``, ``TorchProgram.save_checkpoint`` / ``load_checkpoint``).

Without a compiler: the index's JSON form and its checks; blocks saved by 4 simulated ranks and read back in
other layouts on 3, each rank opening only the files its block overlaps; the files read with NumPy and json
alone; a training step's state saved and loaded as one process; a checkpoint of another model refused naming
the tensors and both shapes; a directory without its index (a save that did not finish) refused.
mpiexec tier (``checkpoint_run.py``, one launch on 4 ranks): 2 AdamW steps on 4 ranks (ZeRO-1, distributed
placement), saved; loaded on 2 ranks (Megatron, distributed placement) and on 3 (batch split, root
placement), 2 more steps each: losses, weights, both Adam moments and the step counter equal 4 uninterrupted
PyTorch steps (float64, 1e-10); a mismatched checkpoint, and a read failing on one rank, raise on every rank.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from distsdfg.errors import CheckpointError, CheckpointMismatchError, DistributedLoweringError
from distsdfg.lowering.placement import ArrayLayout
from distsdfg.runtime import checkpoint as ck

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _rows(name, n_rows, n_cols, cuts, dtype="float64", copies=1):
    """Rows split at ``cuts`` (``[0, 3, 6, ...]``), each block held by ``copies`` consecutive ranks."""
    blocks = tuple(((a, e), (0, n_cols)) for a, e in zip(cuts[:-1], cuts[1:]) for _ in range(copies))
    return ArrayLayout(name, (n_rows, n_cols), dtype, "distributed", blocks)


def _cols(name, n_rows, n_cols, cuts, dtype="float64"):
    return ArrayLayout(name, (n_rows, n_cols), dtype, "distributed",
                       tuple(((0, n_rows), (a, e)) for a, e in zip(cuts[:-1], cuts[1:])))


def _root(name, shape, P, dtype="float64"):
    return ArrayLayout(name, shape, dtype, "root", (tuple((0, n) for n in shape),) + (None,) * (P - 1))


def _everywhere(name, P, dtype="float64"):
    return ArrayLayout(name, (1,), dtype, "root", (((0, 1),),) * P)


TENSORS = [ck.Tensor("fc1.weight", "w", "parameter"), ck.Tensor("fc1.weight:exp_avg", "m", "state"),
           ck.Tensor("fc2.bias", "b", "parameter"), ck.Tensor("optimizer:step", "s", "step")]
VALUES = {"w": np.arange(60.0).reshape(12, 5), "m": np.arange(60.0).reshape(12, 5) / 7 - 3,
          "b": np.array([0.5, -1.5, 2.5]), "s": np.array([2.0])}


def _save_from_four_ranks(directory):
    """What 4 ranks write: ``w`` by rows, ``m`` by rows held twice (ranks 0-1 and 2-3), ``b`` on rank 0,
    ``s`` on every rank; each rank given only its own blocks."""
    lays = {"w": _rows("w", 12, 5, [0, 3, 6, 9, 12]), "m": _rows("m", 12, 5, [0, 6, 12], copies=2),
            "b": _root("b", (3,), 4), "s": _everywhere("s", 4)}
    index = ck.index_for(TENSORS, lays, "test")
    ck.clear_previous(str(directory))
    for q in range(4):
        mine = {a: VALUES[a][lay.slices(q)] for a, lay in lays.items() if lay.blocks[q] is not None}
        ck.write_blocks(str(directory), index, lays, mine, q)
    ck.write_index(str(directory), index)
    return index


def test_index_round_trip_and_its_checks(tmp_path):
    index = _save_from_four_ranks(tmp_path)
    assert ck.CheckpointIndex.from_json(index.to_json()) == index == ck.read_index(str(tmp_path))
    assert [b.file for b in index.entry("fc1.weight").blocks] == [f"w.{k}.npy" for k in range(4)]
    assert [b.file for b in index.entry("fc1.weight:exp_avg").blocks] == ["m.0.npy", "m.1.npy"]   # replicas once
    assert [b.file for b in index.entry("fc2.bias").blocks] == ["b.npy"]        # whole: no block number
    assert [b.file for b in index.entry("optimizer:step").blocks] == ["s.npy"]  # on every rank: written once
    assert index.ranks == 4 and index.entry("fc1.weight").blocks[1].start == (3, 0)
    d = json.loads(index.to_json())
    t = d["tensors"][0]
    for bad, why in [({**d, "format": "other"}, "not a distsdfg-checkpoint index"),
                     ({**d, "tensors": [{**t, "blocks": t["blocks"][:3]}]}, "do not cover"),
                     ({**d, "tensors": [{**t, "blocks": t["blocks"] + t["blocks"][:1]}]}, "overlap"),
                     ({**d, "tensors": [{**t, "blocks": [{**t["blocks"][0], "stop": [3, 6]}] + t["blocks"][1:]}]},
                      "outside its shape"),
                     ({**d, "tensors": [{**t, "blocks": [{**t["blocks"][0], "file": "../w.0.npy"}] + t["blocks"][1:]}]},
                      "outside its directory")]:
        with pytest.raises(CheckpointError, match=why):
            ck.CheckpointIndex.from_json(json.dumps(bad))
    with pytest.raises(CheckpointError, match="cannot be read"):
        ck.CheckpointIndex.from_json("{not json")


def test_saved_by_four_ranks_read_on_three_in_other_layouts(tmp_path, monkeypatch):
    index = _save_from_four_ranks(tmp_path)
    # 3 ranks: w by uneven rows, m by columns, b now distributed by rows, s on every rank
    lays = {"w": _rows("w", 12, 5, [0, 5, 8, 12]), "m": _cols("m", 12, 5, [0, 2, 4, 5]),
            "b": ArrayLayout("b", (3,), "float64", "distributed", (((0, 2),), ((2, 3),), None)),
            "s": _everywhere("s", 3)}
    opened = []
    real = np.load
    monkeypatch.setattr(ck.np, "load", lambda f, *a, **k: opened.append(os.path.basename(f)) or real(f, *a, **k))
    got = []
    for q in range(3):
        opened.clear()
        got.append(ck.read_blocks(str(tmp_path), index, TENSORS, lays, q))
        if q == 0:     # rows 0:5 of w overlap the first two files only, columns 0:2 of m both row blocks
            assert sorted(opened) == ["b.npy", "m.0.npy", "m.1.npy", "s.npy", "w.0.npy", "w.1.npy"]
        if q == 2:
            assert "b.npy" not in opened and sorted(f for f in opened if f.startswith("w")) == ["w.2.npy", "w.3.npy"]
    for a, lay in lays.items():
        for q in range(3):
            if lay.blocks[q] is None:
                assert got[q][a].size == 0        # a distributed layout's rank without a block: an empty array
            else:
                np.testing.assert_array_equal(got[q][a], VALUES[a][lay.slices(q)])
    with pytest.raises(CheckpointError, match=r"`fc1.weight`: the block \[\[0, 13\], \[0, 5\]\] lies outside its shape "
                                              r"\[12, 5\]"):
        index.entry("fc1.weight").read(str(tmp_path), ((0, 13), (0, 5)))
    # a root layout gives the array to rank 0 alone; the others are not given it
    root = {**lays, "b": _root("b", (3,), 3)}
    assert "b" not in ck.read_blocks(str(tmp_path), index, TENSORS, root, 1)
    np.testing.assert_array_equal(ck.read_blocks(str(tmp_path), index, TENSORS, root, 0)["b"], VALUES["b"])


def test_files_load_with_plain_numpy_and_json(tmp_path):
    _save_from_four_ranks(tmp_path)
    with open(tmp_path / "index.json") as f:         # nothing of distsdfg from here on
        index = json.load(f)
    for t in index["tensors"]:
        whole = np.empty(t["shape"], dtype=t["dtype"])
        for b in t["blocks"]:
            whole[tuple(slice(a, e) for a, e in zip(b["start"], b["stop"]))] = np.load(tmp_path / b["file"],
                                                                                       mmap_mode="r")
        np.testing.assert_array_equal(whole, VALUES[t["argument"]])


def test_a_directory_without_its_index_is_not_a_checkpoint(tmp_path):
    _save_from_four_ranks(tmp_path)
    with pytest.raises(CheckpointError, match="elsewhere does not exist"):
        ck.load_checkpoint(str(tmp_path / "elsewhere"), TENSORS, {})
    os.rename(tmp_path / "index.json", tmp_path / "kept.json")     # every block there, the index not
    with pytest.raises(CheckpointError, match="has no index.json: it is not a checkpoint, or its saving did not"):
        ck.load_checkpoint(str(tmp_path), TENSORS, {})
    os.rename(tmp_path / "kept.json", tmp_path / "index.json")
    # a save over it that fails on one rank (a block it was not given): the old index is gone first, and
    # no new one is written, so the directory is never taken for a complete checkpoint
    lays = {a: ck.whole_layouts({a: (v.shape, v.dtype)})[a] for a, v in VALUES.items()}
    with pytest.raises(CheckpointError, match=r"rank 0: `fc2.bias`: rank 0 holds its block \[\[0, 3\]\] but was not "
                                              r"given the array `b`"):
        ck.save_checkpoint(str(tmp_path), TENSORS, lays, {a: v for a, v in VALUES.items() if a != "b"})
    assert not (tmp_path / "index.json").exists() and not (tmp_path / "w.1.npy").exists()
    with pytest.raises(CheckpointError, match="its saving did not finish"):
        ck.load_checkpoint(str(tmp_path), TENSORS, lays)
    with pytest.raises(CheckpointError, match=r"rank 0's block is float64\[3\], the array `b` it was given is "
                                              r"float32\[3\]"):
        ck.save_checkpoint(str(tmp_path), TENSORS, lays, {**VALUES, "b": VALUES["b"].astype(np.float32)})
    ck.save_checkpoint(str(tmp_path), TENSORS, lays, VALUES)
    os.remove(tmp_path / "m.npy")
    with pytest.raises(CheckpointError, match=r"`fc1.weight:exp_avg`: cannot read its block"):
        ck.load_checkpoint(str(tmp_path), TENSORS, lays)


# -- a PyTorch training step's state, one process -------------------------------------------------------

torch = pytest.importorskip("torch")
nn = torch.nn


class MLP(nn.Module):
    def __init__(self, n_in=8, hidden=12, classes=4, p=0.0):
        super().__init__()
        self.fc1, self.drop, self.fc2 = nn.Linear(n_in, hidden), nn.Dropout(p), nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def _step(seed, hidden=12, opt="AdamW", p=0.25):
    torch.manual_seed(seed)
    model = MLP(hidden=hidden, p=p).double()
    x, y = torch.randn(6, 8, dtype=torch.float64), torch.randint(0, 4, (6,))
    optim = getattr(torch.optim, opt)(model.parameters(), lr=0.01)
    import distsdfg
    step = distsdfg.from_torch_train_step(model, nn.CrossEntropyLoss(), optim, (x,), y)
    return step, step.arguments(x, y)


def test_training_state_saved_and_loaded_by_name(tmp_path):
    step, args = _step(0)
    rng = np.random.default_rng(0)
    for a in step.args:       # as after some steps: moments, counter, learning rate, seed all set
        if a.kind in ("state", "step", "lr", "seed"):
            args[a.name][...] = rng.integers(1, 100, args[a.name].shape) if a.kind == "seed" else \
                rng.standard_normal(args[a.name].shape)
    index = step.save_checkpoint(tmp_path / "ck", args)
    names = [t.name for t in index.tensors]
    assert names == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "dropout:seed", "optimizer:step",
                     "optimizer:lr:0", "fc1.weight:exp_avg", "fc1.weight:exp_avg_sq", "fc1.bias:exp_avg",
                     "fc1.bias:exp_avg_sq", "fc2.weight:exp_avg", "fc2.weight:exp_avg_sq", "fc2.bias:exp_avg",
                     "fc2.bias:exp_avg_sq"]
    assert index.entry("fc1.weight:exp_avg").kind == "state" and index.entry("fc1.weight").shape == (12, 8)
    other, fresh = _step(1)       # another initialisation: everything comes from the checkpoint
    loaded = other.load_checkpoint(tmp_path / "ck")
    assert sorted(loaded) == sorted(t.argument for t in index.tensors) and "x" not in loaded
    for k, v in loaded.items():
        np.testing.assert_array_equal(v, args[k])
        assert v.dtype == fresh[k].dtype and v.shape == fresh[k].shape


def test_checkpoint_of_another_model_is_refused_naming_tensors_and_shapes(tmp_path):
    step, args = _step(0)
    step.save_checkpoint(tmp_path / "ck", args)
    wider, _ = _step(0, hidden=16)
    with pytest.raises(CheckpointMismatchError) as e:
        wider.load_checkpoint(tmp_path / "ck")
    msg = str(e.value)
    assert isinstance(e.value, DistributedLoweringError)
    assert "`fc1.weight`: the checkpoint holds float64[12, 8], the program float64[16, 8]" in msg
    assert "`fc2.weight:exp_avg_sq`: the checkpoint holds float64[4, 12], the program float64[4, 16]" in msg
    assert "9 tensor(s) differ" in msg and "`fc2.bias`" not in msg
    sgd, _ = _step(0, opt="SGD", p=0.0)      # no Adam moments, no dropout seed
    with pytest.raises(CheckpointMismatchError, match=r"`fc1.weight:exp_avg` \(float64\[12, 8\]\): in the checkpoint, "
                                                      r"not in the program"):
        sgd.load_checkpoint(tmp_path / "ck")


# -- mpiexec tier ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    from distsdfg.launch.mpiexec import mpiexec_argv
    from distsdfg.testing.mpirun import checkout_env
    folder = tmp_path_factory.mktemp("checkpoint")
    out = folder / "out.json"
    argv = mpiexec_argv(4, [os.path.join(HERE, "checkpoint_run.py"), str(out), str(folder / "ck")], timeout=1200)
    env = checkout_env(PYTHONHASHSEED="0")
    proc = subprocess.run(argv, env=env, cwd=str(folder), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {r["phase"]: r for r in json.loads(out.read_text())}


@pytest.mark.parametrize("phase", ["save:4", "load:2", "load:3"])
def test_resumed_on_other_rank_counts_matches_an_uninterrupted_run(resumed, phase):
    r = resumed[phase]
    assert "error" not in r, r.get("trace")
    assert r["loss_err"] <= 1e-10, r["losses"]
    if phase == "save:4":
        assert r["files"] > r["tensors"]      # the ZeRO-1 state saved as blocks, not gathered
        return
    assert r["step"] == 4.0 and r["rel_err"] <= 1e-10 and r["state_err"] <= 1e-10, r
    if phase == "load:2":      # every rank raised, for a mismatch and for one rank's failure alike
        for mismatch, one_rank in r["refusals"]:
            assert mismatch.startswith("CheckpointMismatchError") and \
                "`fc1.weight`: the checkpoint holds float64[12, 8], the program float64[16, 8]" in mismatch
            assert one_rank.startswith("CheckpointError") and "failed on 1 rank(s): rank 1: `fc1.weight`" in one_rank
