"""``dace_compat.fast_codegen``: the code DaCe generates and the JSON it writes are the same with and
without the remembered SymPy strings and SDFG-wide defined symbols (no compiler, no MPI)."""
import copy
import json
import warnings

import pytest
import sympy

import distsdfg
from distsdfg.dace_compat.codegen import fast_codegen
from distsdfg.dace_compat.expansions import without_ids
from distsdfg.testing.programs import get


def _lowered(name, grids, placement):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sdfg = get(name).sdfg()
        return distsdfg.lower(sdfg, distsdfg.schedule_by_label(sdfg, grids, fuzzy=True), placement=placement)


def _code_and_json(sdfg):
    from dace.codegen import codegen
    program = copy.deepcopy(sdfg)
    program.fill_scope_connectors()
    objects = codegen.generate_code(program)
    return ([(o.name, o.clean_code) for o in objects],
            json.dumps(without_ids(program.to_json()), sort_keys=True))


@pytest.mark.parametrize("name,grids,placement", [("softmax", {"*": (1, 1, 1, 4)}, "distributed"),
                                                   ("mlp", {"*": (2, 1)}, "distributed"),
                                                   ("cg", {"*": (2,)}, "root")])
def test_fast_codegen_generates_the_same_code_and_json(name, grids, placement):
    sdfg = _lowered(name, grids, placement)
    plain = _code_and_json(sdfg)
    with fast_codegen():
        fast = _code_and_json(sdfg)
        again = _code_and_json(sdfg)          # remembered strings and symbols, now used
    assert fast == plain and again == plain
    assert _code_and_json(sdfg) == plain      # restored on exit


def test_remembered_strings_keep_floats_and_integers_apart():
    x = sympy.Symbol("x")
    exprs = [x + 1, x + sympy.Float(1.0), x + sympy.Float("1.0", 30), sympy.Integer(2), sympy.Float(2.0),
             sympy.Rational(1, 2), sympy.Float(0.5)]
    plain = [str(e) for e in exprs]
    with fast_codegen():
        assert [str(e) for e in exprs] == plain
        assert [str(e) for e in reversed(exprs)] == plain[::-1]


def test_nested_contexts_restore_the_originals():
    from dace.sdfg import state as _state
    from sympy.core import _print_helpers
    before = (_print_helpers.Printable.__str__, _state.SDFGState.symbols_defined_at)
    with fast_codegen():
        inner = (_print_helpers.Printable.__str__, _state.SDFGState.symbols_defined_at)
        with fast_codegen():
            assert (_print_helpers.Printable.__str__, _state.SDFGState.symbols_defined_at) == inner
        assert (_print_helpers.Printable.__str__, _state.SDFGState.symbols_defined_at) == inner
        assert inner != before
    assert (_print_helpers.Printable.__str__, _state.SDFGState.symbols_defined_at) == before


def test_code_generation_validates_again_only_a_changed_sdfg(monkeypatch):
    # The lowering validated the SDFG and recorded its structure; code generation validates again
    # only if that structure changed since (a user's edit of the lowered SDFG).
    from distsdfg import dace_compat as dc
    from distsdfg.runtime import builds as runtime
    sdfg = _lowered("mlp", {"*": (2, 1)}, "root")
    assert sdfg._distsdfg.validated == dc.structure_fingerprint(sdfg)
    seen = []
    monkeypatch.setattr(dc, "generate_code", lambda sd, validate=True, **kw: seen.append(validate) or (None, []))
    monkeypatch.setattr(runtime, "build_key", lambda *a: "key")
    monkeypatch.setattr(runtime, "_cached", lambda *a: True)
    monkeypatch.setattr(dc, "load_compiled", lambda *a: None)
    runtime._build(sdfg, sdfg.build_folder, False, False, 0.0)
    sdfg.add_state("edited")
    assert sdfg._distsdfg.validated != dc.structure_fingerprint(sdfg)
    runtime._build(sdfg, sdfg.build_folder, False, False, 0.0)
    assert seen == [False, True]


def test_generated_program_keeps_no_transformation_history():
    # DaCe records each expansion of code generation, and the first record deep-copies the whole
    # SDFG (which program.sdfg would serialise): generate_code turns the record off.
    from distsdfg import dace_compat as dc
    sdfg = _lowered("mlp", {"*": (2, 1)}, "root")
    program, objects = dc.generate_code(sdfg, validate=False)
    assert objects and program.orig_sdfg is None and not program.transformation_hist
