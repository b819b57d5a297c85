"""PyTorch frontend: ``nn.Module`` inference and whole training steps as DaCe programs.

``from_torch(module, example_inputs)`` exports the module with ``torch.export``, decomposes it
to core ATen, and writes a NumPy-level ``@dace.program`` (``TorchProgram.source``) with one
argument per parameter, buffer and input; its SDFG (``TorchProgram.sdfg``) is an ordinary
program for ``distsdfg.maps / lower / compile``. ``from_torch_train_step`` traces forward,
loss and PyTorch's own backward (``torch.func.grad_and_value`` under ``make_fx``) into one
graph and appends the optimizer's update (SGD with momentum, Adam, AdamW) as element-wise
kernels that write the parameter and optimizer-state arrays in place.

Data flow: capture (torch graph + placeholders) -> emit (``torch_ops`` per node) -> source ->
``dace.program`` -> SDFG with kernels named after the ops. Nothing is executed by torch
except on fake tensors during tracing.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import keyword
import os
import re
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..checks import example_tensors as _example_tensors
from ..checks import require_module as _require_module
from ..errors import TorchFrontendError
from .torch_decomp import export_decompositions
from .torch_emit import Emitter, UnsupportedOpError, Val, dace_type
from .torch_ops import EMITTERS
from ..dace_compat.semantics import with_numpy_semantics

__all__ = ["TorchProgram", "from_torch", "UnsupportedOpError", "TorchFrontendError"]


def torch_module():
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        raise TorchFrontendError("the PyTorch frontend needs torch: pip install -e '.[torch]'") from None
    return torch


def _np_dtype(tdtype) -> np.dtype:
    torch = torch_module()
    return np.dtype(torch.empty((), dtype=tdtype).numpy().dtype)


def to_numpy(value, what: str) -> np.ndarray:
    torch = torch_module()
    if isinstance(value, torch.Tensor):
        return np.ascontiguousarray(value.detach().cpu().numpy()).copy()
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value).copy()
    raise TorchFrontendError(f"{what} must be a torch.Tensor or a NumPy array, got {type(value).__name__}")


def array_name(path: str, taken: set) -> str:
    """A program argument name for a module path (``fc1.weight`` -> ``fc1_weight``)."""
    name = re.sub(r"\W", "_", path)
    # "_*" are tasklet connectors, "i<k>" map parameters (temporaries avoid argument names).
    if (not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_")
            or re.fullmatch(r"i\d+", name)):
        name = "p_" + name
    base, k = name, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


@dataclasses.dataclass(frozen=True)
class Argument:
    """One argument of the generated program and where its value comes from."""
    name: str
    kind: str                 # "parameter" | "buffer" | "constant" | "input" | "target" | "state" | "lr" | "step" | "seed"
    source: str               # state_dict key, input position, or "<param key>:<state key>"
    shape: Tuple[int, ...]
    dtype: np.dtype


class TorchProgram:
    """A PyTorch module (or training step) as a DaCe program.

    ``sdfg``: the SDFG (lower and compile it like any other). ``source``: the generated
    ``@dace.program``. ``arguments(*inputs)``: keyword arguments to call the compiled SDFG with
    (copies of the parameters, buffers and optimizer state as NumPy arrays, and the inputs).
    Calling returns the module's outputs (the loss for a training step, as a one-element
    array; 0-d outputs are one-element arrays). ``state_dict(arguments)``: the arrays back as
    ``module.state_dict()`` names and torch tensors. ``save_checkpoint(path, arguments, program)`` /
    ``load_checkpoint(path, program)``: the state to a directory of ``.npy`` blocks and back, on any number of
    ranks.
    """

    def __init__(self, name, source, function, args: List[Argument], outputs: List[Tuple[Tuple[int, ...], np.dtype]],
                 values: Dict[str, np.ndarray], kernels: Dict[str, str], training: bool,
                 bounds: Optional[Dict[str, Tuple[int, Tuple[int, ...]]]] = None):
        self.name = name
        self.source = source
        self.function = function
        self.args = args
        self.outputs = outputs
        self._values = values
        self.kernels = kernels          # kernel (map label) -> the torch node it comes from
        self.training = training
        self.bounds = dict(bounds or {})   # integer input -> (rows it indexes, other values allowed)
        self._sdfg = None

    @property
    def sdfg(self):
        if self._sdfg is None:
            self._sdfg = _to_sdfg(self.function, self.kernels)
        return self._sdfg

    @property
    def inputs(self) -> List[str]:
        return [a.name for a in self.args if a.kind in ("input", "target")]

    @property
    def parameters(self) -> Dict[str, str]:
        """Program array -> ``state_dict`` key, for parameters and buffers."""
        return {a.name: a.source for a in self.args if a.kind in ("parameter", "buffer")}

    def arguments(self, *inputs, lr: Optional[Sequence[float]] = None) -> Dict[str, np.ndarray]:
        """Keyword arguments for one call: fresh copies of the module's (and optimizer's) state
        as captured, plus ``inputs`` (tensors or arrays; a training step takes ``x, y``).
        ``lr`` overrides the learning rate of each parameter group."""
        user = [a for a in self.args if a.kind in ("input", "target")]
        if len(inputs) != len(user):
            raise TorchFrontendError(f"{self.name} takes {len(user)} inputs ({', '.join(a.name for a in user)}), "
                                     f"got {len(inputs)}")
        out = {}
        for a in self.args:
            if a.kind in ("input", "target"):
                v = to_numpy(inputs[int(a.source)], f"input `{a.name}`")
                if v.shape != a.shape:
                    raise TorchFrontendError(f"input `{a.name}` has shape {v.shape}; the program was traced for "
                                             f"{a.shape} (trace again with inputs of that shape)")
                out[a.name] = v.astype(a.dtype, copy=False)
                if a.name in self.bounds:
                    self._check_indices(a.name, out[a.name])
            elif a.kind == "lr" and lr is not None:
                out[a.name] = np.array([lr[int(a.source)]], dtype=np.float64)
            else:
                out[a.name] = self._values[a.name].copy()
        return out

    def _check_indices(self, name: str, v: np.ndarray) -> None:
        rows, allowed = self.bounds[name]
        bad = ~(((v >= 0) & (v < rows)) | np.isin(v, allowed))
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise TorchFrontendError(
                f"input `{name}` holds {v[where]} at {where}, but it indexes {rows} rows (valid: 0..{rows - 1}"
                f"{'' if not allowed else ' or ' + ', '.join(map(str, allowed))})")

    def state_dict(self, arguments: Dict[str, np.ndarray]) -> dict:
        """``{state_dict key: torch.Tensor}`` from the (updated) argument arrays."""
        torch = torch_module()
        return {a.source: torch.from_numpy(np.array(arguments[a.name]).reshape(a.shape))
                for a in self.args if a.kind in ("parameter", "buffer")}

    def optimizer_state(self, arguments: Dict[str, np.ndarray]) -> dict:
        """``{state_dict key: {state name: torch.Tensor}}``: momentum buffers, Adam moments, step."""
        torch = torch_module()
        out: Dict[str, dict] = {}
        step = next((arguments[a.name] for a in self.args if a.kind == "step"), None)
        for a in self.args:
            if a.kind == "state":
                key, state = a.source.split(":")
                out.setdefault(key, {})[state] = torch.from_numpy(np.array(arguments[a.name]))
                if step is not None:
                    out[key]["step"] = torch.tensor(float(np.asarray(step).reshape(-1)[0]))
        return out

    def save_checkpoint(self, path, arguments: Dict[str, np.ndarray], program=None):
        """Collective over ``program``'s ranks (None: one process): save the state held in ``arguments``
        (this rank's arrays: its blocks in distributed placement) into the directory ``path``, one ``.npy``
        file per block and an ``index.json`` that rank 0 writes last (docs/torch.md, "Checkpoints").
        Returns the index (``distsdfg.runtime.checkpoint.CheckpointIndex``)."""
        from .torch_checkpoint import save
        return save(self, path, arguments, program)

    def load_checkpoint(self, path, program=None) -> Dict[str, np.ndarray]:
        """Collective over ``program``'s ranks (None: one process): the state saved in ``path`` (by any
        number of ranks) as this rank passes it to ``program``: its blocks in distributed placement, the
        one-element arrays on every rank, other arrays whole on rank 0. Each rank reads only the files its
        blocks overlap. A checkpoint of other tensors or shapes raises ``CheckpointMismatchError``."""
        from .torch_checkpoint import load
        return load(self, path, program)

    def __str__(self) -> str:
        ins = ", ".join(f"{a.name}{list(a.shape)}" for a in self.args if a.kind in ("input", "target"))
        return (f"TorchProgram {self.name}({ins}): {len(self.args)} arrays, {len(self.kernels)} kernels"
                f"{', training step' if self.training else ''}")


# -- capture ----------------------------------------------------------------------------------------

def node_meta(node) -> List[Tuple[Tuple[int, ...], np.dtype]]:
    torch = torch_module()
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else [val]
    out = []
    for v in vals:
        if isinstance(v, torch.Tensor):
            shape = tuple(int(s) for s in v.shape)
            out.append((shape, _np_dtype(v.dtype)))
        else:
            out.append(((), None))
    return out


def _where(node) -> str:
    trace = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip()]
    frames = [i for i, ln in enumerate(lines) if ln.startswith("File ")]
    # The innermost frame of the user's code, not of torch's modules (nn.Dropout, F.*).
    torch_dir = os.path.dirname(torch_module().__file__)
    user = [i for i in frames if torch_dir not in lines[i]]
    frames = user or frames
    if frames:
        i = frames[-1]
        code = lines[i + 1] if i + 1 < len(lines) else ""
        return f"{lines[i]}: {code}"
    mod = node.meta.get("nn_module_stack")
    if mod:
        return "module " + " / ".join(str(v[0]) for v in mod.values())
    return f"graph node `{node.name}`"


def emit_graph(em: Emitter, graph, env: Dict[object, object]) -> List[object]:
    """Emit every call in ``graph``; ``env`` maps placeholders to Vals. Returns the outputs."""
    torch = torch_module()
    import operator

    def arg(a):
        if isinstance(a, torch.fx.Node):
            return env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(arg(x) for x in a)
        return a

    outputs = None
    for node in graph.nodes:
        if node.op == "placeholder" or (node.op == "get_attr" and node in env):
            continue
        if node.op == "output":
            outputs = arg(node.args[0])
            continue
        if node.op != "call_function":
            raise UnsupportedOpError(f"graph node `{node.name}` ({node.op}) is not a function call")
        key = "getitem" if node.target is operator.getitem else _op_key(node)
        emit = EMITTERS.get(key)
        if emit is None:
            raise UnsupportedOpError(
                f"ATen operator `{key}` (node `{node.name}`, from {_where(node)}) has no translation in the "
                f"PyTorch frontend{_hint(key)}; supported operators are listed in "
                f"distsdfg.frontend.torch_ops.EMITTERS")
        args = arg(node.args)
        kwargs = {k: arg(v) for k, v in node.kwargs.items()}
        try:
            env[node] = emit(em, node.name, node_meta(node), list(args), kwargs)
        except UnsupportedOpError as exc:
            raise UnsupportedOpError(f"{exc} (ATen operator `{key}`, node `{node.name}`, from {_where(node)})") from None
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


_RANDOM = ("bernoulli", "native_dropout", "rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
           "normal", "uniform", "multinomial", "randperm")


def _hint(key: str) -> str:
    """What to do about an operator without translation, where there is something to say."""
    op = key.split(".")[1] if key.count(".") >= 2 else key
    if op in _RANDOM:
        return (": random numbers are not supported (e.g. nn.Dropout with p > 0 in training mode); call "
                "module.eval() or use p=0")
    return ""


_INDEXING = {"aten.embedding.default": (1, lambda n: n.args[0].meta["val"].shape[0]),
             "aten.gather.default": (2, lambda n: n.args[0].meta["val"].shape[n.args[1]]),
             "aten.scatter.value": (2, lambda n: n.args[0].meta["val"].shape[n.args[1]])}


def _op_key(node) -> str:
    t = node.target
    return f"aten.{t._opname}.{t._overloadname}" if hasattr(t, "_opname") else str(t)


def index_bounds(graph, names: Dict[object, str]) -> Dict[str, Tuple[int, Tuple[int, ...]]]:
    """Inputs that end up as indices: ``{argument: (rows, values allowed besides 0..rows-1)}``.

    An index reaches an embedding or gather through any chain of operators on integer tensors (not through
    a floating one: ``gather(p, 1, p.argmax(1))`` bounds no input); values compared against anywhere on
    the way (cross-entropy's ``ignore_index``, also of labels padded and shifted first) are allowed too."""
    torch = torch_module()
    out: Dict[str, Tuple[int, Tuple[int, ...]]] = {}
    for node in graph.nodes:
        spec = _INDEXING.get(_op_key(node)) if node.op == "call_function" else None
        if spec is None:
            continue
        rows = int(spec[1](node))
        seen, todo, inputs, allowed = set(), [node.args[spec[0]]], [], set()
        while todo:
            n = todo.pop()
            if not isinstance(n, torch.fx.Node) or n in seen:
                continue
            seen.add(n)
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor) and (val.dtype.is_floating_point or val.dtype.is_complex):
                continue
            # a value compared against anywhere on the way (labels padded, shifted, then tested for -100)
            allowed |= {int(u.args[1]) for u in n.users if _op_key(u) in ("aten.ne.Scalar", "aten.eq.Scalar")
                        and isinstance(u.args[1], int)}
            if n.op == "placeholder" and n in names:
                inputs.append(n)
            todo.extend(n.all_input_nodes)
        for n in inputs:
            old = out.get(names[n])
            rows_n = min(rows, old[0]) if old else rows
            out[names[n]] = (rows_n, tuple(sorted(allowed | set(old[1] if old else ()))))
    return out


def _signature(args: List[Argument]) -> str:
    parts = []
    for a in args:
        parts.append(f"{a.name}: {dace_type(a.dtype)}[{', '.join(str(s) for s in (a.shape or (1,)))}]")
    return ", ".join(parts)


def _assemble(name: str, args: List[Argument], em: Emitter, returns: List[Val]) -> Tuple[str, Dict[int, str]]:
    header = ["import math", "import dace", "import numpy as np", "", "", "@dace.program",
              f"def {name}({_signature(args)}):"]
    body = list(em.lines)
    if returns:
        body.append("    return " + ", ".join(v.name for v in returns))
    else:
        body.append("    return")
    offset = len(header) + 1            # line numbers are 1-based
    kernels = {}
    for idx, kname in em.map_names.items():
        kernels[f"{name}_{offset + idx}"] = kname
    return "\n".join(header + body) + "\n", kernels


def _load(name: str, source: str):
    folder = os.path.join(tempfile.gettempdir(), f"distsdfg_torch_{os.getuid() if hasattr(os, 'getuid') else 0}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.py")
    if not os.path.exists(path) or open(path).read() != source:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(f"distsdfg_torch_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


@with_numpy_semantics
def _to_sdfg(function, kernels: Dict[str, str]):
    """Parse the generated program and name every explicit map after the op it computes."""
    import dace
    from .. import dace_compat as dc
    from ..dace_compat.parse import fast_parse
    with fast_parse():          # the same SDFG: see dace_compat.parse
        sdfg = function.to_sdfg()
    dc.order_return_arrays(sdfg)
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, dace.nodes.MapEntry):
            # DaCe labels an explicit map `<module>_<function>_<line>`.
            hit = next((k for k in kernels if node.map.label.endswith(k)), None)
            if hit is not None:
                node.map.label = kernels[hit]
    return sdfg


def _program_name(prefix: str, module, source_key: str) -> str:
    digest = hashlib.sha1(source_key.encode()).hexdigest()[:10]
    cls = re.sub(r"\W", "", type(module).__name__) or "module"
    return f"{prefix}_{cls}_{digest}".lower()


def finish_program(prefix, module, em, args, returns, values, training, bounds) -> TorchProgram:
    draft, _ = _assemble("program", args, em, returns)
    name = _program_name(prefix, module, draft)
    source, kernels = _assemble(name, args, em, returns)
    function = _load(name, source)
    outputs = [(v.shape, v.dtype) for v in returns]
    return TorchProgram(name, source, function, args, outputs, values, dict(kernels), training, bounds)


def output_vals(em: Emitter, outs, arg_names) -> List[Val]:
    returns = []
    for k, v in enumerate(outs):
        if not isinstance(v, Val):
            raise TorchFrontendError(f"output {k} of the module is a {type(v).__name__}, not a tensor")
        if v.is_const or v.view or v.name in arg_names:
            v = em.elementwise(f"output_{k}", v.shape, v.dtype, [v], "a0")
        returns.append(v)
    return returns


def from_torch(module, example_inputs, *, strict: bool = False) -> TorchProgram:
    """Translate ``module``'s forward for inputs shaped like ``example_inputs`` (a tensor or tuple).

    Parameters and buffers become arrays named after their module paths (``fc1.weight`` ->
    ``fc1_weight``), inputs after the forward's arguments. Unsupported operators raise
    ``UnsupportedOpError`` naming the ATen operator and the source line it came from."""
    torch = torch_module()
    _require_module(module, "from_torch")
    example_inputs = _example_tensors(example_inputs, "example_inputs")
    try:
        ep = torch.export.export(module, example_inputs, strict=strict)
    except Exception as exc:
        raise TorchFrontendError(f"torch.export could not trace {type(module).__name__}: {exc}") from exc
    ep = ep.run_decompositions(export_decompositions())
    sig = ep.graph_signature
    for spec in sig.output_specs:
        if spec.kind.name != "USER_OUTPUT":
            raise TorchFrontendError(
                f"{type(module).__name__}.forward updates `{spec.target}` ({spec.kind.name.lower()}), e.g. "
                f"batch-norm statistics in training mode, which is not supported (in training steps neither); call "
                f"module.eval() (batch norm then normalises with its running statistics)")
    state = ep.state_dict
    em = Emitter()
    env, args, values, taken = {}, [], {}, set()
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    user_pos = 0
    for spec in sig.input_specs:
        node = placeholders[spec.arg.name]
        (shape, dtype), = node_meta(node)
        kind = spec.kind.name
        if kind == "PARAMETER":
            name, src, value = array_name(spec.target, taken), spec.target, state[spec.target]
            akind = "parameter"
        elif kind == "BUFFER":
            name, src = array_name(spec.target, taken), spec.target
            value = state[spec.target] if spec.target in state else ep.constants[spec.target]
            akind = "buffer" if spec.persistent is not False else "constant"
        elif kind in ("CONSTANT_TENSOR",):
            name, src, value, akind = array_name("const_" + spec.target, taken), spec.target, \
                ep.constants[spec.target], "constant"
        elif kind == "USER_INPUT":
            if dtype is None:
                raise TorchFrontendError(f"input `{spec.arg.name}` is not a tensor; only tensor inputs are supported")
            name, src, value, akind = array_name(spec.arg.name, taken), str(user_pos), None, "input"
            user_pos += 1
        else:
            raise TorchFrontendError(f"input `{spec.arg.name}` of kind {kind} is not supported")
        em.reserve(name)
        args.append(Argument(name, akind, src, shape, dtype))
        if value is not None:
            values[name] = to_numpy(value, name).reshape(shape or (1,))
        env[node] = Val(name, shape, dtype)
    outs = emit_graph(em, ep.graph, env)
    returns = output_vals(em, outs, {a.name for a in args})
    names = {node: env[node].name for node in env if node.op == "placeholder"}
    return finish_program("torch", module, em, args, returns, values, False, index_bounds(ep.graph, names))
