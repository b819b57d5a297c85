"""Hugging Face ``transformers`` models from tiny configs (random weights, nothing downloaded) under
distsdfg, against PyTorch; rank 0 writes JSON.

    mpiexec -n 4 python -m mpi4py -m distsdfg.testing.hf_run OUT.json gpt2:forward llama:train bert:train ...

A case is ``model:mode[:attn]``: ``gpt2`` (``GPT2LMHeadModel``), ``bert``
(``BertForSequenceClassification``) or ``llama`` (``LlamaForCausalLM``, grouped-query attention); ``forward``
(logits) or ``train`` (three AdamW steps; GPT-2 and Llama compute their own loss from ``labels``, BERT's
step takes the user's ``loss_fn(logits, target)``); ``attn`` ``sdpa`` (default) or ``eager``. Every case
passes an attention mask with padding, and is split by the batch over however many ranks run
(``schedule_from_shardings``), compiled once on rank 0.
"""
from __future__ import annotations

import copy
import sys
import time

import numpy as np

BATCH, SEQ, VOCAB, CLASSES = 4, 8, 64, 3


def model(name: str, attn: str = "sdpa", seed: int = 0):
    """A tiny ``transformers`` model with random weights, dropout 0."""
    import torch
    import transformers as tf
    torch.manual_seed(seed)
    if name == "gpt2":
        cfg = tf.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0)
        m = tf.GPT2LMHeadModel(cfg)
    elif name == "bert":
        cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=16, num_labels=CLASSES,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        m = tf.BertForSequenceClassification(cfg)
    elif name == "llama":
        cfg = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
        m = tf.LlamaForCausalLM(cfg)
    else:
        raise KeyError(f"no model {name!r}: gpt2, bert, llama")
    m.config._attn_implementation = attn
    return m


def inputs(seed: int = 1):
    """Token ids, an attention mask whose second and last rows end in padding, labels (next tokens for the
    language models, a class for BERT)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    mask[1, SEQ - 3:] = 0
    mask[-1, SEQ - 1:] = 0
    classes = torch.randint(0, CLASSES, (BATCH,), generator=g)
    return ids, mask, classes


def wrappers():
    """(Logits, OwnLoss): modules of (ids, mask) -> logits and (ids, mask, labels) -> the model's own loss."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask):
            return self.m(input_ids=ids, attention_mask=mask).logits

    class OwnLoss(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask, labels):
            return self.m(input_ids=ids, attention_mask=mask, labels=labels).loss
    return Logits, OwnLoss


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def _first(loss) -> float:
    return float(np.asarray(loss).reshape(-1)[0])


def program(name: str, mode: str, attn: str = "sdpa"):
    """(module, TorchProgram, the program's inputs, reference: a function of a fresh module copy that returns
    (losses or logits))."""
    import torch
    import distsdfg
    m = model(name, attn)
    ids, mask, classes = inputs()
    Logits, OwnLoss = wrappers()
    if mode == "forward":
        w = Logits(m.eval())
        return w, distsdfg.from_torch(w, (ids, mask)), (ids, mask)
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    if name == "bert":      # the user's own loss on the logits
        w = Logits(m)
        return w, distsdfg.from_torch_train_step(w, torch.nn.functional.cross_entropy, opt, (ids, mask), classes), \
            (ids, mask, classes)
    w = OwnLoss(m)      # the model's own loss (labels shifted inside, padding ignored)
    labels = ids.masked_fill(mask == 0, -100)
    return w, distsdfg.from_torch_train_step(w, lambda loss, _: loss, opt, (ids, mask, labels), torch.zeros(1)), \
        (ids, mask, labels, torch.zeros(1))


def reference_steps(w, name, args, steps=3):
    """PyTorch's losses, the module after ``steps`` AdamW steps of a copy of ``w``, and the first step's
    gradients."""
    import torch
    ref = copy.deepcopy(w)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    losses, grads = [], {}
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ref(*args[:2]), args[2]) if name == "bert" else ref(*args[:3])
        loss.backward()
        if not grads:
            grads = {k: p.grad.detach().numpy().copy() for k, p in ref.named_parameters()}
        opt.step()
        losses.append(float(loss.item()))
    return losses, ref, grads


def parameter_errors(got, ref, grads) -> dict:
    """Relative error of every parameter after the steps, over the elements whose gradient is not rounding
    noise: an attention's key bias has a zero gradient but for rounding (softmax ignores a shift that is
    the same for every key), and Adam moves such an element by about its learning rate whatever the noise's
    sign, so two float32 computations of it disagree by that much. Elements whose first gradient is below
    1e-5 of the model's largest are left out (``noise_elements`` counts them)."""
    top = max(float(np.abs(g).max()) for g in grads.values())
    errs, noise = {}, 0
    for k, v in ref.named_parameters():
        keep = np.abs(grads[k]) > 1e-5 * top
        noise += int((~keep).sum())
        want = v.detach().numpy()
        if keep.any():
            errs[k] = float(np.abs(got[k].numpy() - want)[keep].max() / max(np.abs(want).max(), 1e-30))
    return {"errs": errs, "noise_elements": noise}


def run_case(case: str, comm) -> dict:
    import distsdfg
    name, mode, *rest = case.split(":")
    attn = rest[0] if rest else "sdpa"
    t0 = time.time()
    w, prog, args = program(name, mode, attn)
    sdfg = prog.sdfg
    t1 = time.time()
    P = comm.size
    shard = {a: (P,) + (1,) * (len(sdfg.arrays[a].shape) - 1) for a in ("ids", "mask", "labels", "target")
             if a in sdfg.arrays and sdfg.arrays[a].shape[0] == BATCH} if P > 1 else {}
    sched = distsdfg.schedule_from_shardings(sdfg, shard, nprocs=P) if shard else None
    if sched is not None:
        distsdfg.lower(sdfg, sched)
    else:
        distsdfg.lower(sdfg, "auto", nprocs=1)
    t2 = time.time()
    fn = distsdfg.compile(sdfg, comm=comm)
    t3 = time.time()
    result = {"case": case, "ranks": P, "trace_s": t1 - t0, "lower_s": t2 - t1, "compile_s": t3 - t2,
              "kernels": len(distsdfg.maps(sdfg)) if sched is not None else None}
    if sched is not None:
        report = distsdfg.comm_report(sdfg, nprocs=P)
        result["bytes_per_call"] = int(sum(sum(s.sent) for s in report))
    call_args = prog.arguments(*args)
    if mode == "forward":
        out = fn(**call_args)
        if comm.rank == 0:
            result["rel_err"] = _rel(out, w(*args).detach().numpy())
        return result
    losses = [fn(**call_args) for _ in range(3)]
    if comm.rank == 0:
        ref_losses, ref, grads = reference_steps(w, name, args)
        losses = [_first(v) for v in losses]
        result["losses"], result["ref_losses"] = losses, ref_losses
        result["loss_err"] = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
        checked = parameter_errors(prog.state_dict(call_args), ref, grads)
        errs = checked["errs"]
        result["noise_elements"] = checked["noise_elements"]
        result["rel_err_at"] = max(errs, key=errs.get)
        result["rel_err"] = errs[result["rel_err_at"]]
    return result


def main(argv):
    from distsdfg.testing.mpirun import run_cases
    run_cases(argv[0], argv[1:], run_case, quiet=())


if __name__ == "__main__":
    main(sys.argv[1:])
