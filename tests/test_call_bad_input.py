"""Malformed call descriptions are refused with CALL-0, naming what is wrong and where."""

import pytest

import shardlaw.spec as S
from shardlaw.properties.registry import checks
from shardlaw.spec import Arg, Call, JitOptions, Out
from shardlaw.spec.core.rules import Rejection

MESH = S.Mesh.iota((2, 4), ("x", "y"))

BAD = [
    (lambda: Arg("borrowed", (4,)), "an argument's kind"),
    (lambda: Arg.committed((4,), None), "committed argument's sharding"),
    (lambda: Arg.committed((6,), S.NamedSharding(MESH, S.P("y"))), "placeable by its own sharding"),
    (lambda: Arg.numpy((4,), "float128"), "an argument's dtype"),
    (lambda: Arg.scalar("str"), "a Python scalar's type"),
    (lambda: Arg.numpy((-1,)), "non-negative"),
    (lambda: Out((4,), "float32", -2), "a result's source"),
    (lambda: JitOptions(static_argnums="0"), "static_argnums"),
    (lambda: JitOptions(keep_unused=1), "keep_unused"),
    (lambda: JitOptions(device=-1), "device"),
    (lambda: Call(args=[Arg.numpy((2,))]), "a call's args"),
    (lambda: Call(args=(3,)), "args[0]"),
    (lambda: Call(outputs=(4,)), "outputs[0]"),
    (lambda: Call(uses=(1,)), "uses"),
    (lambda: Call(devices=0), "at least 1"),
    (lambda: Call(default_device=9), "default_device"),
    (lambda: Call(args=(Arg.committed((4,), S.SingleDeviceSharding(11)),)), "devices of args[0]"),
    (lambda: Call(context_mesh="mesh"), "the context mesh"),
    (lambda: Call(compiler=("{replicated}",)), "compiler"),
    (lambda: Call(compiler_in=(S.Replicated(), "{replicated}")), "compiler_in"),
]


@checks("CALL-0")
@pytest.mark.parametrize("build,words", BAD)
def test_malformed_descriptions_are_refused(build, words):
    with pytest.raises(Rejection) as info:
        build()
    assert info.value.rule in ("CALL-0", "VAL-1"), info.value
    assert words in str(info.value)


@checks("CALL-0")
def test_a_dynamic_argument_must_be_an_array():
    """A Static value at a position that is not static is refused, not traced."""
    call = Call(args=(S.Static(3),), outputs=Out(()))
    verdict = S.jit_call(call)
    assert verdict.rule == "CALL-0" and "args[0]" in verdict.message


@checks("CALL-0")
def test_well_formed_descriptions_are_accepted():
    call = Call(args=(Arg.committed((8,), S.NamedSharding(MESH, S.P("x"))), S.Static(1)),
                outputs=Out((8,)), options=JitOptions(static_argnums=1))
    assert S.jit_call(call).accepted
