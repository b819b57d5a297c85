"""Planning time of EinDecomp on a 24-layer transformer-like EinGraph (seed 000's use case).

    python benchmarks/plan_transformer.py [--layers 24] [--nprocs 64] [--searcher dp]

Each layer: Q, K, V projections (einsum bik,khj->bhij), scores (bhik,bhjk->bhij), a softmax
(row max, subtract, exp, row sum, divide), the attention values (bhik,bhkj->bhij), the
output projection over heads (bhse,hej->bsj), a residual add, and a two-layer MLP
(bsj,jf->bsf, ReLU, bsf,fj->bsj) with its residual add: 16 kernels per layer. Prints the
planning time and the predicted cost. Record the figure in docs/planner.md.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from distsdfg.planner.timemodel import get_model  # noqa: E402
from distsdfg.analysis.eingraph import Edge, EinGraph, Operand, Vertex  # noqa: E402
from distsdfg.planner.auto import search  # noqa: E402


def transformer_graph(layers=24, B=8, S=512, E=1024, H=16, F=4096, item=4) -> EinGraph:
    EH = E // H
    vs, es = [], []
    pin, pout = {}, {}
    holder = {}          # array -> (vertex, name, via_input)

    def op(name, labels, shape):
        return Operand(name, tuple(labels), tuple(shape), item)

    def vertex(key, labels, bounds, ins, outs, partial=False):
        v = Vertex(len(vs), key, key, "map", tuple(labels), tuple(bounds), ins, outs, partial)
        vs.append(v)
        for o in ins:
            if o.array in holder:
                src, name, via = holder[o.array]
                es.append(Edge(src, v.index, o.array, name, via))
            else:
                pin.setdefault(v.index, []).append(o.array)
                holder[o.array] = (v.index, o.array, True)
        for o in outs:
            holder[o.array] = (v.index, o.array, False)
        return v

    x = "x0"
    for L in range(layers):
        p = f"l{L}_"
        for w in "QKV":
            vertex(p + w, "bikhj", (B, S, E, H, EH),
                   [op(x, "bik", (B, S, E)), op(p + "W" + w, "khj", (E, H, EH))],
                   [op(p + w, "bhij", (B, H, S, EH))], partial=True)
        vertex(p + "scores", "bhijk", (B, H, S, S, EH),
               [op(p + "Q", "bhik", (B, H, S, EH)), op(p + "K", "bhjk", (B, H, S, EH))],
               [op(p + "sc", "bhij", (B, H, S, S))], partial=True)
        vertex(p + "rowmax", "bhij", (B, H, S, S), [op(p + "sc", "bhij", (B, H, S, S))],
               [op(p + "mx", "bhi", (B, H, S))], partial=True)
        vertex(p + "sub", "bhij", (B, H, S, S), [op(p + "sc", "bhij", (B, H, S, S)), op(p + "mx", "bhi", (B, H, S))],
               [op(p + "d", "bhij", (B, H, S, S))])
        vertex(p + "exp", "bhij", (B, H, S, S), [op(p + "d", "bhij", (B, H, S, S))], [op(p + "ex", "bhij", (B, H, S, S))])
        vertex(p + "rowsum", "bhij", (B, H, S, S), [op(p + "ex", "bhij", (B, H, S, S))],
               [op(p + "sm", "bhi", (B, H, S))], partial=True)
        vertex(p + "div", "bhij", (B, H, S, S), [op(p + "ex", "bhij", (B, H, S, S)), op(p + "sm", "bhi", (B, H, S))],
               [op(p + "P", "bhij", (B, H, S, S))])
        vertex(p + "vals", "bhijk", (B, H, S, EH, S),
               [op(p + "P", "bhik", (B, H, S, S)), op(p + "V", "bhkj", (B, H, S, EH))],
               [op(p + "va", "bhij", (B, H, S, EH))], partial=True)
        vertex(p + "outproj", "bhsej", (B, H, S, EH, E),
               [op(p + "va", "bhse", (B, H, S, EH)), op(p + "WO", "hej", (H, EH, E))],
               [op(p + "o", "bsj", (B, S, E))], partial=True)
        vertex(p + "res1", "bsj", (B, S, E), [op(p + "o", "bsj", (B, S, E)), op(x, "bsj", (B, S, E))],
               [op(p + "r1", "bsj", (B, S, E))])
        vertex(p + "mlp1", "bsjf", (B, S, E, F), [op(p + "r1", "bsj", (B, S, E)), op(p + "W1", "jf", (E, F))],
               [op(p + "h", "bsf", (B, S, F))], partial=True)
        vertex(p + "relu", "bsf", (B, S, F), [op(p + "h", "bsf", (B, S, F))], [op(p + "a", "bsf", (B, S, F))])
        vertex(p + "mlp2", "bsfj", (B, S, F, E), [op(p + "a", "bsf", (B, S, F)), op(p + "W2", "fj", (F, E))],
               [op(p + "m", "bsj", (B, S, E))], partial=True)
        vertex(p + "res2", "bsj", (B, S, E), [op(p + "m", "bsj", (B, S, E)), op(p + "r1", "bsj", (B, S, E))],
               [op(p + "x", "bsj", (B, S, E))])
        x = p + "x"
    pout[len(vs) - 1] = [x]
    return EinGraph(vs, es, pin, pout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--nprocs", type=int, default=64)
    ap.add_argument("--searcher", default="dp")
    ap.add_argument("--model", default="bytes")
    args = ap.parse_args()
    g = transformer_graph(args.layers)
    t0 = time.perf_counter()
    plan = search(g, args.nprocs, get_model(args.model), args.searcher)
    dt = time.perf_counter() - t0
    print(f"{len(g.vertices)} kernels, {len(g.edges)} edges, P={args.nprocs}, searcher={args.searcher}, "
          f"model={args.model}: planned in {dt:.2f} s, predicted {plan.value:,.0f}")
    first = {v.key: d for v, d in zip(g.vertices, plan.splits) if v.key.startswith("l0_")}
    for k, d in first.items():
        print(f"  {k:12s} {d}")


if __name__ == "__main__":
    main()
