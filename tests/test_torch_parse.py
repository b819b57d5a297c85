"""``dace_compat.parse.fast_parse``: the SDFG of a generated PyTorch program is the same as DaCe's
own parse gives (no compile). DaCe's simplify iterates over sets of names, so both parses run in
one child process with a fixed hash seed, as every rank of a job runs."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import contextlib, json, sys, warnings
warnings.simplefilter("ignore")
sys.path[:0] = [ROOT, ROOT + "/tests"]
import torch, distsdfg
from distsdfg.dace_compat import parse
from distsdfg.dace_compat.expansions import without_ids
from gpt_model import tiny

idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
one = tiny(layers=1).train()
cases = [  # (name, program, the parse to compare fast_parse with)
    ("forward, both attention forms", distsdfg.from_torch(tiny(mixed=True).eval(), (idx,)), contextlib.nullcontext),
    ("AdamW training step", distsdfg.from_torch_train_step(one, lambda out, y: out[1], one.optimizer(), (idx, idx),
                                                           idx), parse.batched_renames),
]
fast, out = parse.fast_parse, {}
for name, prog, other in cases:
    texts = []
    for how in (fast, other):
        parse.fast_parse = how
        prog._sdfg = None
        texts.append(json.dumps(without_ids(prog.sdfg.to_json()), sort_keys=True))
    out[name] = [len(prog.kernels), texts[0] == texts[1], len(texts[0])]
print("RESULT " + json.dumps(out))
""".replace("ROOT", repr(ROOT))


def test_fast_parse_gives_the_same_sdfg():
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("RESULT "))[7:])
    for name, (kernels, same, size) in out.items():
        assert kernels > 100 and size > 100_000, (name, kernels, size)
        assert same, f"{name}: fast_parse gave another SDFG"
