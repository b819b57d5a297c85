"""The step-table codes: one declaration (distsdfg/values/codes.py) that the C++ runtime's headers agree
with, and the modes (distsdfg/values/modes.py) that stand for their string values."""
import json
import os
import pickle
import re

import pytest

from distsdfg.errors import OptionError, PlacementError
from distsdfg.mpi import codes_header
from distsdfg.mpi.encode import encode_step, op_code
from distsdfg.mpi.environment import INCLUDE_DIR
from distsdfg.values import codes
from distsdfg.values.codes import CODE_ENUMS
from distsdfg.values.modes import Buffers, Collective, Placement, StepKind, Target

_ENUM = re.compile(r"\benum\s+(?:class\s+)?(\w+)\s*(?::\s*[\w:]+\s*)?\{([^}]*)\}", re.S)


def header_enums(text: str) -> dict:
    """Every ``enum Name : type { A = 1, ... }`` of a C++ text: {Name: {member: value}}."""
    text = re.sub(r"//[^\n]*", "", text)
    out = {}
    for name, body in _ENUM.findall(text):
        members = {}
        for item in filter(None, (x.strip() for x in body.split(","))):
            key, _, value = item.partition("=")
            members[key.strip()] = int(value, 0) if value.strip() else None
        out.setdefault(name, []).append(members)
    return out


def drift(found: dict) -> list:
    """How the enums parsed from the headers differ from ``CODE_ENUMS`` (empty: they agree)."""
    problems = []
    for cls, prefix in CODE_ENUMS.items():
        want = {f"{prefix}{m.name}": int(m.value) for m in cls}
        decls = found.get(cls.__name__, [])
        if len(decls) != 1:
            problems.append(f"enum {cls.__name__} is declared {len(decls)} times in the headers")
        for got in decls:
            if got != want:
                problems.append(f"enum {cls.__name__}: headers {got}, Python {want}")
    return problems


def _all_headers() -> str:
    texts = []
    for name in sorted(os.listdir(INCLUDE_DIR)):
        with open(os.path.join(INCLUDE_DIR, name)) as f:
            texts.append(f.read())
    return "\n".join(texts)


def test_generated_header_is_current():
    assert not codes_header.stale(), ("distsdfg_codes.h differs from distsdfg/values/codes.py: run "
                                      "`python -m distsdfg.mpi.codes_header`")
    assert codes_header.main(["--check"]) == 0


def test_headers_declare_each_code_once_with_pythons_values():
    assert drift(header_enums(_all_headers())) == []
    with open(os.path.join(INCLUDE_DIR, "distsdfg_runtime.h")) as f:
        assert '#include "distsdfg_codes.h"' in f.read()


def test_a_changed_value_or_a_copied_enum_is_drift(tmp_path):
    text = _all_headers()
    assert "M_P2P = 7" in text
    changed = drift(header_enums(text.replace("M_P2P = 7", "M_P2P = 8")))
    assert len(changed) == 1 and "enum Mode" in changed[0]
    copied = drift(header_enums(text + "\nenum Op : int64_t { OP_NONE = 0, OP_SUM = 1 };\n"))
    assert copied[0] == "enum Op is declared 2 times in the headers" and len(copied) == 2
    stale = tmp_path / "distsdfg_codes.h"
    stale.write_text(codes_header.render().replace("DT_BOOL = 12", "DT_BOOL = 13"))
    assert codes_header.stale(str(stale))


def test_modes_have_the_codes_of_their_names():
    assert [k.code for k in StepKind] == list(codes.Kind)
    redist = {c for c in Collective if c.name in codes.Mode.__members__}
    assert {c.code for c in redist} == set(codes.Mode)
    assert Collective.P2P.code == codes.Mode.P2P == 7
    with pytest.raises(KeyError):
        Collective.SCATTERV.code        # a call to or from rank 0, not a redistribution's
    assert op_code(None) == codes.Op.NONE and op_code("max") == codes.Op.MAX
    assert codes.Dtype.of("complex128") == 11
    with pytest.raises(ValueError, match="float16.*float32, float64"):
        codes.Dtype.of("float16")


def test_a_mode_is_its_string():
    k = StepKind.SCATTER
    assert k == "scatter" and str(k) == "scatter" and f"{k:8s}|" == "scatter |" and repr(k) == "'scatter'"
    assert hash(k) == hash("scatter") and {"scatter": 1}[k] == 1 and {k: 1}["scatter"] == 1
    assert json.dumps({"kind": k}) == '{"kind": "scatter"}'
    assert pickle.loads(pickle.dumps(k)) is k
    assert StepKind("redist") is StepKind.REDIST and Collective("Isend/Irecv") is Collective.P2P


def test_parse_names_the_valid_values():
    assert Placement.parse("root") is Placement.ROOT and Placement.parse(Placement.ROOT) is Placement.ROOT
    with pytest.raises(OptionError, match=r"^target 'tpu' is not supported; use 'cpu' or 'gpu'$"):
        Target.parse("tpu", what="target")
    with pytest.raises(PlacementError, match=r"Placement 'rank0' is not supported; use 'root' or 'distributed'"):
        Placement.parse("rank0", error=PlacementError)
    with pytest.raises(OptionError, match=r"use 'host', 'staged', 'device', 'emulated' or 'emulated-staged'"):
        Buffers.parse("pinned")


def test_records_take_the_strings_and_hold_the_modes():
    from distsdfg.solver.redistribute import plan_redistribution
    from distsdfg.solver.solve import solve_step
    from distsdfg.values.plan import CommStep, StepSpec
    spec = StepSpec(index=0, kind="scatter", array="A", local="A_local", kernel=0, kernel_label="k", dtype="float64",
                    itemsize=8, grid=(2,), rank_syms=("p0",), boxes=((("4*p0", "4*p0 + 3"),),), origin=("4*p0",),
                    local_shape=("4",), global_shape=("8",))
    assert spec.kind is StepKind.SCATTER and "kind='scatter'" in repr(spec)
    cs = solve_step(spec, {"p0": 0}, 2)
    assert type(cs.flags) is int
    table = encode_step(cs)
    assert table[:6] == [1, 1, 0, 1, 2, 0] and all(type(v) is int for v in table)
    plan = plan_redistribution("A", [((0,), (4,)), ((4,), (4,))], [((0,), (8,))] * 2)
    assert plan.collective is Collective.ALLGATHERV
    assert type(plan).from_json(plan.to_json()) == plan
    assert CommStep("Bcast", "A", (0,), (0,)).collective is Collective.BCAST
