"""Training steps from PyTorch: forward, backward and the optimizer update as one DaCe program.

``from_torch_train_step(module, loss_fn, optimizer, example_inputs, example_targets)`` records the
loss's forward and PyTorch's own autograd backward with ``torch.export`` (``torch_frontend``),
then appends the update of every parameter by SGD, Adam, AdamW, RMSprop or Adagrad (with their hyper-parameters
per parameter group) as element-wise maps, and returns a ``TorchProgram`` whose arguments are
the parameters, the optimizer state and the batch, and whose call returns the loss and writes
the updated parameters and state in place.
"""
from __future__ import annotations

import inspect
import re
from typing import Dict, List, Tuple

import numpy as np

from ..checks import example_tensors as _example_tensors
from ..checks import require_module as _require_module
from ..errors import TorchFrontendError
from .torch_decomp import train_decompositions
from .torch_emit import Emitter, Val, literal
from .torch_frontend import (Argument, TorchProgram, array_name, emit_graph, finish_program, index_bounds,
                             node_meta, output_vals, to_numpy, torch_module)

__all__ = ["from_torch_train_step", "zero_shardings"]


_OPTIMIZERS = ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad")


def _optimizer_groups(optimizer, params: Dict[str, object]) -> Tuple[str, Dict[str, Tuple[int, dict]]]:
    """``(kind, {param key: (group index, hyper-parameters)})`` for the parameters it updates."""
    kind = type(optimizer).__name__
    if kind not in _OPTIMIZERS:
        raise TorchFrontendError(f"optimizer {kind} is not supported; use one of {', '.join(_OPTIMIZERS)}")
    by_id = {id(p): k for k, p in params.items()}
    out = {}
    for g, group in enumerate(optimizer.param_groups):
        for p in group["params"]:
            if id(p) not in by_id:
                raise TorchFrontendError("the optimizer updates a tensor that is not a parameter of the module")
            if group.get("differentiable") or group.get("capturable"):
                raise TorchFrontendError(f"{kind} with differentiable=True or capturable=True is not supported")
            out[by_id[id(p)]] = (g, group)
    return kind, out


def _update_code(kind: str, h: dict, dtype) -> List[str]:
    """Tasklet lines of one optimizer step for one element.

    Connectors: ``p`` (parameter in), ``g`` (gradient), ``lr``, ``s`` (step count after this step),
    ``<state>`` in and ``<state>_out``; writes ``p_out``."""
    L = lambda v: literal(v, dtype)  # noqa: E731
    if kind in ("RMSprop", "Adagrad"):
        return _adaptive_code(kind, h, L)
    code = ["d = g"]
    wd = h.get("weight_decay", 0.0)
    if kind == "AdamW" and wd:
        code.append(f"q = p * ({L(1)} - lr * {L(wd)})")
    else:
        code.append("q = p")
        if wd:
            code.append(f"d = d + {L(wd)} * p")
    if h.get("maximize"):
        code.append("d = -d")
    if kind == "SGD":
        mom, damp = h.get("momentum", 0.0), h.get("dampening", 0.0)
        if mom:
            code.append(f"b = (d if s == 1 else {L(mom)} * buf + {L(1 - damp)} * d)")
            code.append("buf_out = b")
            code.append(f"d = d + {L(mom)} * b" if h.get("nesterov") else "d = b")
        code.append("p_out = q - lr * d")
    else:
        b1, b2 = h["betas"]
        eps = h["eps"]
        code.append(f"m = exp_avg + {L(1 - b1)} * (d - exp_avg)")
        code.append(f"v = {L(b2)} * exp_avg_sq + {L(1 - b2)} * d * d")
        code.append("exp_avg_out = m")
        code.append("exp_avg_sq_out = v")
        code.append(f"bc1 = 1.0 - {float(b1)!r} ** s")
        code.append(f"bc2 = 1.0 - {float(b2)!r} ** s")
        if h.get("amsgrad"):
            code.append("vm = max(max_exp_avg_sq, v)")
            code.append("max_exp_avg_sq_out = vm")
            code.append(f"den = math.sqrt(vm) / math.sqrt(bc2) + {L(eps)}")
        else:
            code.append(f"den = math.sqrt(v) / math.sqrt(bc2) + {L(eps)}")
        code.append("p_out = q - (lr / bc1) * m / den")
    return code


def _adaptive_code(kind: str, h: dict, L) -> List[str]:
    """RMSprop and Adagrad, in PyTorch's order: the gradient negated (``maximize``), weight decay added,
    the squares accumulated (RMSprop: a running average, centred by the gradients' own running average;
    Adagrad: a sum), the step divided by their root plus ``eps`` (RMSprop with momentum through a buffer;
    Adagrad with the learning rate decayed by the step count)."""
    code = ["d = -g" if h.get("maximize") else "d = g"]
    if h.get("weight_decay", 0.0):
        code.append(f"d = d + {L(h['weight_decay'])} * p")
    eps = L(h["eps"])
    if kind == "Adagrad":
        code += ["acc_out = acc + d * d", f"clr = lr / (1.0 + (s - 1.0) * {float(h.get('lr_decay', 0.0))!r})",
                 f"p_out = p - clr * d / (math.sqrt(acc + d * d) + {eps})"]
        return code
    a = h["alpha"]
    code += [f"sq_out = {L(a)} * sq + {L(1 - a)} * d * d"]
    if h.get("centered"):
        code += [f"gavg_out = gavg + {L(1 - a)} * (d - gavg)",
                 f"avg = math.sqrt(({L(a)} * sq + {L(1 - a)} * d * d) - (gavg + {L(1 - a)} * (d - gavg)) * "
                 f"(gavg + {L(1 - a)} * (d - gavg))) + {eps}"]
    else:
        code.append(f"avg = math.sqrt({L(a)} * sq + {L(1 - a)} * d * d) + {eps}")
    if h.get("momentum", 0.0):
        code += [f"buf_out = {L(h['momentum'])} * buf + d / avg", f"p_out = p - lr * ({L(h['momentum'])} * buf + d / avg)"]
    else:
        code.append("p_out = p - lr * d / avg")
    return code


def _states(kind: str, h: dict) -> List[str]:
    if kind == "SGD":
        return ["momentum_buffer"] if h.get("momentum", 0.0) else []
    if kind == "Adagrad":
        return ["sum"]
    if kind == "RMSprop":
        return (["square_avg"] + (["momentum_buffer"] if h.get("momentum", 0.0) else [])
                + (["grad_avg"] if h.get("centered") else []))
    return ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if h.get("amsgrad") else [])


_CONN = {"momentum_buffer": "buf", "exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq", "max_exp_avg_sq": "max_exp_avg_sq",
         "square_avg": "sq", "grad_avg": "gavg", "sum": "acc"}
_CONN_NAMES = tuple(_CONN.values())


_NAMES = ("p", "g", "lr", "s", "d", "q", "b", "m", "v", "vm", "bc1", "bc2", "den", "avg", "clr", *_CONN_NAMES)


def _private(conns):
    """Connector names as the update code writes them, made private (``p`` -> ``_p``)."""
    return [("_" + c, arr, sub) for c, arr, sub in conns]


def _private_code(lines: List[str]) -> str:
    pattern = re.compile(r"\b(" + "|".join(sorted(_NAMES, key=len, reverse=True)) + r")(_out)?\b")
    return "\n".join(pattern.sub(lambda m: "_" + m.group(0), ln) for ln in lines)


def from_torch_train_step(module, loss_fn, optimizer, example_inputs, example_targets) -> TorchProgram:
    """One training step (forward, ``loss_fn(module(x), y)``, backward, ``optimizer.step()``) as one program.

    Called with ``arguments(x, y)``, the SDFG updates the parameter and optimizer-state arrays
    in place and returns the loss (computed before the update, like ``loss.item()`` in a torch
    loop). Gradients come from PyTorch's autograd (``torch.func.grad_and_value`` traced with
    ``make_fx`` and decomposed to core ATen). Optimizers: SGD (momentum, dampening, Nesterov,
    weight decay, maximize), Adam and AdamW (amsgrad, weight decay, maximize),
    RMSprop (alpha, centered, momentum, weight decay, maximize), Adagrad (lr_decay, initial accumulator)."""
    torch = torch_module()
    from torch.fx.experimental.proxy_tensor import make_fx

    _require_module(module, "from_torch_train_step")
    if not callable(loss_fn):
        raise TorchFrontendError(f"loss_fn must be callable as loss_fn(output, target), got {type(loss_fn).__name__} "
                                 f"(e.g. torch.nn.functional.mse_loss or torch.nn.MSELoss())")
    xs = _example_tensors(example_inputs, "example_inputs")
    ys = _example_tensors(example_targets, "example_targets")
    if len(ys) != 1:    # a one-element tuple is the target itself
        raise TorchFrontendError(f"example_targets has {len(ys)} tensors; a training step takes one target "
                                 f"(loss_fn(output, target)): pass one tensor, or stack the targets into one")
    y = ys[0]
    params = dict(module.named_parameters())
    trained = {k: p for k, p in params.items() if p.requires_grad}
    frozen = {k: p for k, p in params.items() if not p.requires_grad}
    buffers = dict(module.named_buffers())
    kind, groups = _optimizer_groups(optimizer, trained)
    keys = list(trained)
    fkeys, bkeys = list(frozen), list(buffers)

    def step(tp, fp, bufs, xs_, y_):
        def loss_of(tp_):
            # the buffers as tensors of the step itself: a module may update them in place (batch norm's
            # running statistics in training mode); their final values are the step's further outputs
            own = tuple(b.clone() for b in bufs)
            state = {**dict(zip(keys, tp_)), **dict(zip(fkeys, fp)), **dict(zip(bkeys, own))}
            out = torch.func.functional_call(module, state, xs_)
            return loss_fn(out, y_), own
        grads, (loss, new_bufs) = torch.func.grad_and_value(loss_of, has_aux=True)(tp)
        return (loss, *grads, *new_bufs)

    detach = lambda d: tuple(v.detach() for v in d.values())  # noqa: E731

    def trace(step_fn):
        # functionalize: decompositions (silu's and label smoothing's backward) and modules
        # (nn.MultiheadAttention's in-projection) write temporaries in place (`copy_`, `add_`, views of
        # them); the emitters translate value semantics only, so mutations become out-of-place operators
        return make_fx(torch.func.functionalize(step_fn, remove="mutations"), decomposition_table=train_decompositions(),
                       record_stack_traces=True)(
            detach(trained), detach(frozen), detach(buffers), tuple(t.detach() for t in xs), y.detach())
    try:
        try:
            gm = trace(step)
        except Exception as exc:
            if "_local_scalar_dense" not in str(exc):
                raise
            # The model's Python read a tensor's value (transformers' mask builders test `mask.all()` unless
            # they see an export): the forward and loss through torch.export first, then the same trace
            gm = trace(_exported_step(module, loss_fn, xs, y, keys, fkeys, bkeys))
    except TorchFrontendError:
        raise
    except Exception as exc:
        if "mutate a captured Tensor" in str(exc):
            raise TorchFrontendError(
                f"the training step of {type(module).__name__} updates a buffer in place (e.g. batch norm's running "
                f"statistics in training mode), which is not supported; call .eval() on such layers (batch norm "
                f"then normalises with its running statistics) or use LayerNorm. PyTorch said: {exc}") from exc
        raise TorchFrontendError(f"tracing the training step of {type(module).__name__} failed: {exc}") from exc

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    sources = ([("parameter", k, trained[k]) for k in keys] + [("parameter", k, frozen[k]) for k in fkeys]
               + [("buffer", k, buffers[k]) for k in bkeys]
               + [("input", str(i), None) for i in range(len(xs))] + [("target", str(len(xs)), None)])
    if len(placeholders) != len(sources):
        raise TorchFrontendError(f"traced {len(placeholders)} inputs, expected {len(sources)}")
    em = Emitter()
    em.training = True     # weights read as they are (not copied transposed), scalars on every rank
    env, args, values, taken = {}, [], {}, set()
    sig = inspect.signature(module.forward)
    input_names = [p for p in sig.parameters][:len(xs)]
    for node, (akind, src, tensor) in zip(placeholders, sources):
        (shape, dtype), = node_meta(node)
        if akind in ("parameter", "buffer"):
            name = array_name(src, taken)
            values[name] = to_numpy(tensor, src).reshape(shape or (1,))
        else:
            base = input_names[int(src)] if akind == "input" and int(src) < len(input_names) else \
                ("target" if akind == "target" else f"input{src}")
            name = array_name(base, taken)
        em.reserve(name)
        if akind != "parameter" or src not in trained:
            em.gradless.add(name)
        args.append(Argument(name, akind, src, shape, dtype))
        env[node] = Val(name, shape, dtype)
    for node in gm.graph.nodes:
        # Tensors the loss or the module holds that are neither parameters nor buffers (the class
        # weights of CrossEntropyLoss(weight=...), a plain tensor attribute): constant arguments
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            (shape, dtype), = node_meta(node) if "val" in node.meta else [(tuple(value.shape), None)]
            dtype = dtype or to_numpy(value, node.target).dtype
            name = array_name(f"const_{node.target}", taken)
            em.reserve(name)
            em.gradless.add(name)
            args.append(Argument(name, "constant", node.target, tuple(shape), np.dtype(dtype)))
            values[name] = to_numpy(value, name).reshape(tuple(shape) or (1,))
            env[node] = Val(name, tuple(shape), np.dtype(dtype))
    # Dropout draws from a counter-based generator (torch_random): this step's seed and its counter
    step_name, seed_name = array_name("optim_step", taken), array_name("rng_seed", taken)
    em.reserve(step_name)
    em.reserve(seed_name)
    em.random = (seed_name, step_name)
    outs = emit_graph(em, gm.graph, env)
    if getattr(em, "draws", 0):
        args.append(Argument(seed_name, "seed", "seed", (1,), np.dtype(np.int64)))
        values[seed_name] = np.array([int(torch.randint(0, 2 ** 31 - 1, (1,)).item())], dtype=np.int64)
    loss, grads, new_bufs = outs[0], outs[1:1 + len(keys)], outs[1 + len(keys):]
    loss_out = output_vals(em, [loss], {a.name for a in args})
    # Buffers the forward updated (batch norm's running statistics): written back after the graph
    for key, new in zip(bkeys, new_bufs):
        b = next(a for a in args if a.kind == "buffer" and a.source == key)
        if isinstance(new, Val) and new.name != b.name:
            em.elementwise(f"update_{b.name}", b.shape, b.dtype, [new], "a0", out=Val(b.name, b.shape, b.dtype))

    # Optimizer: a step counter, one learning rate per group, then one update kernel per parameter.
    step_arg = Argument(step_name, "step", "step", (1,), np.dtype(np.float64))
    args.append(step_arg)
    first_state = optimizer.state.get(next(iter(trained.values()), None), {}) if trained else {}
    values[step_arg.name] = np.array([float(first_state.get("step", 0.0))], dtype=np.float64)
    lr_args = {}
    for g, group in enumerate(optimizer.param_groups):
        a = Argument(array_name(f"optim_lr_{g}", taken), "lr", str(g), (1,), np.dtype(np.float64))
        args.append(a)
        values[a.name] = np.array([float(group["lr"])], dtype=np.float64)
        lr_args[g] = a.name
    # The counter's increment is a plain statement, not a map: the lowering runs such code on every
    # rank, so a counter that every rank holds stays valid everywhere and never travels.
    em.line(f"{step_arg.name}[0] = {step_arg.name}[0] + 1.0")
    for key, grad in zip(keys, grads):
        if key not in groups:
            continue
        g, h = groups[key]
        p = next(a for a in args if a.kind == "parameter" and a.source == key)
        grad = em.materialize(grad, f"grad_{p.name}")
        if grad.dtype != p.dtype:
            grad = em.elementwise(f"grad_{p.name}_cast", p.shape, p.dtype, [grad], "a0")
        full = ", ".join(f"i{d}" for d in range(len(p.shape or (1,))))
        reads = [("p", p.name, full), ("g", grad.name, full), ("lr", lr_args[g], "0"), ("s", step_arg.name, "0")]
        writes = [("p_out", p.name, full)]
        opt_state = optimizer.state.get(trained[key], {})
        for st in _states(kind, h):
            sa = Argument(array_name(f"{p.name}__{st}", taken), "state", f"{key}:{st}", p.shape, p.dtype)
            args.append(sa)
            init = opt_state.get(st)
            values[sa.name] = (to_numpy(init, sa.name).reshape(p.shape or (1,)) if init is not None
                               else np.zeros(p.shape or (1,), dtype=p.dtype))
            reads.append((_CONN[st], sa.name, full))
            writes.append((_CONN[st] + "_out", sa.name, full))
        code = _update_code(kind, h, p.dtype)
        em.kernel(f"{kind.lower()}_{p.name}", p.shape, _private(reads), _private(writes), _private_code(code))
    names = {node: env[node].name for node in placeholders}
    return finish_program("torchstep", module, em, args, loss_out, values, True, index_bounds(gm.graph, names))


def _exported_step(module, loss_fn, xs, y, keys, fkeys, bkeys):
    """The training step's function (as ``from_torch_train_step``'s ``step``) over ``torch.export``'s graph of
    ``loss_fn(module(*xs), y)``: Python that reads a tensor's value while the model runs (an ``if mask.all():``
    shortcut, a count read with ``.item()``) is evaluated by the export as it would be in any exported model:
    code that checks ``torch.compiler.is_exporting()`` takes its tracing path, and a branch that truly depends
    on a value is refused by the export, naming the model's line."""
    torch = torch_module()

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.module = module

        def forward(self, *args):
            return loss_fn(self.module(*args[:-1]), args[-1])

    try:
        ep = torch.export.export(WithLoss(), tuple(xs) + (y,), strict=False)
    except Exception as exc:
        raise TorchFrontendError(
            f"the training step of {type(module).__name__} reads a tensor's value in Python (data-dependent "
            f"control flow), and torch.export could not trace it either: {exc}\nRewrite that line without "
            f"reading the value (torch.where instead of `if`), or compute the value outside the step") from exc
    class Replay(torch.nn.Module):
        """The exported graph, run node by node with each node's source location kept (``_where``
        then names the model's line, not the graph's generated code)."""

        def __init__(self):
            super().__init__()
            self.graph = ep.module()

        def forward(self, *args):
            from torch.fx import traceback as fx_traceback
            with fx_traceback.preserve_node_meta():
                out = torch.fx.Interpreter(self.graph).run(*args)
            return out[0] if isinstance(out, (list, tuple)) else out
    graph = Replay()
    names = tuple([f"graph.module.{k}" for k in ks] for ks in (keys, fkeys, bkeys))

    def step(tp, fp, bufs, xs_, y_):
        def loss_of(tp_):
            own = tuple(b.clone() for b in bufs)
            state = {**dict(zip(names[0], tp_)), **dict(zip(names[1], fp)), **dict(zip(names[2], own))}
            return torch.func.functional_call(graph, state, tuple(xs_) + (y_,)), own
        grads, (loss, new_bufs) = torch.func.grad_and_value(loss_of, has_aux=True)(tp)
        return (loss, *grads, *new_bufs)
    return step


def zero_shardings(sdfg, batch_shardings, nprocs: int) -> dict:
    """``batch_shardings`` (``{input: ways per dimension}``, the batch split) plus every optimizer
    update kernel of a training step (``sgd_``/``adam_``/``adamw_<param>``) split by its first axis
    where ``nprocs`` divides it: ZeRO-1's partition of the update, for ``schedule_from_shardings``.
    Lowered with ``placement="distributed"``, each rank keeps its rows of the parameters and the
    optimizer state between steps; a step reduce-scatters every gradient to the rows each rank
    updates and all-gathers every updated parameter: DDP's all-reduce volume."""
    from ..analysis.kernels import maps
    out = dict(batch_shardings)
    for m in maps(sdfg):
        kind, _, param = m.label.partition("_")
        if kind in ("sgd", "adam", "adamw") and param in sdfg.arrays:
            shape = [int(d) for d in sdfg.arrays[param].shape]
            if len(shape) == len(m.params) and shape[0] % nprocs == 0:
                out[m.label] = (nprocs,) + (1,) * (len(shape) - 1)
    return out
