"""Write the jit-call vectors of the 0.4.13 edition (vectors/jit-0.4.13/), each held to jax 0.4.13.

``python -m shardlaw.properties.older_vectors_gen DIR`` writes one vector per call below,
with ``"jax": "0.4.13"`` and the spec's 0.4.13 verdict as the expectation, after checking
that a real ``jax.jit`` of JAX 0.4.13 agrees with it (calls 0.4.13 cannot write, refused by
CALL-1, are checked against the spec alone). Each call but one is one the two editions
decide otherwise (``shardlaw upgrade DIR`` shows how); PJIT-2's reads the same in both.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["older_vector_calls", "write_older_vectors"]


def older_vector_calls() -> list[tuple[str, str, str, Any]]:
    """(name, rule, side, call) for each vector of the 0.4.13 edition."""
    from shardlaw.spec import (
        Arg, Call, JitOptions, Mesh, NamedSharding, Out, P, SingleDeviceSharding,
    )

    mesh = Mesh.iota((2, 4), ("x", "y"))
    full = Mesh.iota((8,), ("x",))
    lone = NamedSharding(Mesh.iota((1,), ("e",)), P())
    backwards = NamedSharding(Mesh((8,), ("x",), tuple(range(7, -1, -1))), P("x"))
    return [
        ("fit-1-indivisible-is-a-value-error", "FIT-1", "reject",
         Call(args=(Arg.numpy((3, 8)),), outputs=Out((3, 8)),
              options=JitOptions(in_shardings=NamedSharding(mesh, P("x"))))),
        ("da-1-committed-argument-not-moved", "DA-1", "reject",
         Call(args=(Arg.committed((8,), SingleDeviceSharding(3)),), outputs=Out((8,)),
              options=JitOptions(in_shardings=NamedSharding(full, P())))),
        ("keep-1-unused-committed-argument-compared", "DA-1", "reject",
         Call(args=(Arg.committed((8,), NamedSharding(full, P("x"))),
                    Arg.committed((6,), NamedSharding(Mesh.iota((6,), ("d",)), P()))),
              outputs=Out((8,), source=0), uses=(True, False))),
        ("out-3-one-device-result-is-single", "OUT-3", "accept",
         Call(args=(Arg.committed((6,), lone),), outputs=Out((6,), source=0))),
        ("out-1-given-result-read-back", "OUT-1", "accept",
         Call(args=(Arg.numpy((8,)),), outputs=(Out((8,), source=0), Out((8,), source=0)),
              options=JitOptions(out_shardings=(None, NamedSharding(full, P("x")))))),
        ("aot-3-other-device-order-copied", "AOT-3", "accept",
         Call(args=(Arg.numpy((8,)),), outputs=Out((8,), source=0),
              options=JitOptions(in_shardings=NamedSharding(full, P("x"))),
              aot_args=(Arg.committed((8,), backwards),))),
        ("call-1-no-set-mesh", "CALL-1", "reject",
         Call(args=(Arg.numpy((8,)),), outputs=Out((8,)), context_mesh=full)),
        ("out-1-unused-named-input-gives-no-type", "OUT-1", "accept",
         Call(args=(Arg.committed((), NamedSharding(Mesh.iota((8,), ("w",)), P()), "int32"),
                    Arg.numpy((8,))),
              outputs=(Out((8,), source=1), Out((8,), source=1)), uses=(False, True),
              options=JitOptions(out_shardings=(NamedSharding(full, P("x")), None)))),
        ("pjit-1-block-result-untyped", "PJIT-1", "accept",
         Call(args=(Arg.numpy((8, 4)),), outputs=Out((8, 4), source=0), resource_mesh=mesh)),
        ("pjit-2-none-is-replicated-over-the-block", "PJIT-2", "accept",
         Call(args=(Arg.numpy((8, 4)),), outputs=Out((8, 4), source=0), resource_mesh=mesh,
              options=JitOptions(in_shardings=None, out_shardings=P("y")))),
    ]


def write_older_vectors(directory: Path, check_in_jax: bool = True) -> list[Path]:
    """Write the vectors into ``directory``; with ``check_in_jax``, hold each expressible
    call to jax 0.4.13 first (a disagreement stops the writing)."""
    from shardlaw.properties.older_harness import compare_older, expressible, with_older_oracle
    from shardlaw.spec.jit.pipeline import jit_call
    from shardlaw.spec.vectors.jit_vectors import dump_vector

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rule, side, call in older_vector_calls():
        verdict = jit_call(call, jax="0.4.13")
        if check_in_jax and expressible(call):
            verdict, answer, problems = compare_older(call)
            if problems:
                raise AssertionError(f"{name}: jax 0.4.13 disagrees: {problems}")
            call = with_older_oracle(call, answer)   # the compiler's choices, as JAX made them
        vector = dump_vector(call, verdict, name=name, rule=rule, side=side, jax="0.4.13",
                             description="Decided otherwise by JAX 0.10.2: see "
                                         "docs/upgrading.rst (shardlaw upgrade).")
        path = directory / f"{name}.json"
        path.write_text(json.dumps(vector, indent=1) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_older_vectors(Path(sys.argv[1] if len(sys.argv) > 1
                                         else "vectors/jit-0.4.13")):
        print(path)
