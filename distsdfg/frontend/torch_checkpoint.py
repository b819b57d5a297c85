"""Checkpoints of a PyTorch program's state (``TorchProgram.save_checkpoint`` / ``load_checkpoint``): the
parameters and buffers under their ``state_dict`` names, the optimizer state, the step counter, the learning
rates and the dropout seed, in the directory format of ``distsdfg.runtime.checkpoint``.

Tensor names in the index: ``fc1.weight`` (a parameter or buffer), ``fc1.weight:exp_avg`` (its optimizer
state, as ``optimizer.state[p]`` names it), ``optimizer:step``, ``optimizer:lr:<group>``, ``dropout:seed``.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from ..runtime.checkpoint import CheckpointIndex, Tensor, load_checkpoint, program_layouts, save_checkpoint, \
    whole_layouts

__all__ = ["SAVED_KINDS", "tensors_of", "save", "load"]

#: The arguments a checkpoint holds (not the batch, nor constants the module defines).
SAVED_KINDS = ("parameter", "buffer", "state", "step", "lr", "seed")


def _name(kind: str, source: str) -> str:
    return {"step": "optimizer:step", "lr": f"optimizer:lr:{source}", "seed": "dropout:seed"}.get(kind, source)


def tensors_of(prog) -> List[Tensor]:
    """The tensors of ``prog``'s checkpoint, in the order of its arguments."""
    return [Tensor(_name(a.kind, a.source), a.name, a.kind) for a in prog.args if a.kind in SAVED_KINDS]


def _layouts(prog, tensors, program):
    if program is None:      # one process (``prog.sdfg(**args)``): every array whole, 0-d ones as one element
        specs = {a.name: (tuple(a.shape) or (1,), a.dtype) for a in prog.args}
        return whole_layouts({t.argument: specs[t.argument] for t in tensors})
    return program_layouts(program, [t.argument for t in tensors])


def save(prog, path, arguments: Dict[str, np.ndarray], program=None) -> CheckpointIndex:
    tensors = tensors_of(prog)
    comm = getattr(program, "comm", None)
    return save_checkpoint(str(path), tensors, _layouts(prog, tensors, program), arguments, comm=comm,
                           program=prog.name)


def load(prog, path, program=None) -> Dict[str, np.ndarray]:
    tensors = tensors_of(prog)
    comm = getattr(program, "comm", None)
    return load_checkpoint(str(path), tensors, _layouts(prog, tensors, program), comm=comm)
