"""How long the spec takes to answer for a transformed jit call, against the device count.

Issue 14's goal: the batched or differentiated verdict of a 10-argument call on an abstract
65,536-device mesh in at most 2 ms, and constant in the device count. Two questions, each on
meshes of 8, 65,536 (concrete and abstract) and 2**40 devices:

* ``vmap``: :func:`shardlaw.spec.vmap_jit` for 10 arguments split over ('x',), ('y',) or
  replicated, batched at axis 0, with and without ``spmd_axis_name``;
* ``grad``: the JVP, linearized (primal and tangent) and transposed jit equations of a
  10-argument call with 5 results (:mod:`shardlaw.spec.transforms.autodiff`), as ``jax.grad`` stages them.

The table gives the median time per answer; the last column says whether it is within the
goal. Run: ``python benchmarks/bench_transforms.py`` (``--quick`` for fewer repeats).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from shardlaw.spec import UNSPECIFIED, AbstractMesh, Mesh, NamedSharding, P, vmap_jit
from shardlaw.spec.transforms.autodiff import (
    JitBody, JitEquation, jvp_equation, linearized_equations, transposed_equation,
)

GOAL_MS = 2.0
SPECS = (P("x"), P(None, "y"), P())


def meshes() -> list[tuple[str, Any]]:
    names = ("x", "y", "batch")
    return [("8, concrete", Mesh.iota((2, 2, 2), names)),
            ("65,536, concrete", Mesh.iota((256, 16, 16), names)),
            ("65,536, abstract", AbstractMesh((256, 16, 16), names)),
            ("2**40, abstract", AbstractMesh((1 << 20, 1 << 10, 1 << 10), names))]


def vmap_question(mesh: Any, spmd: str | None) -> Callable[[], Any]:
    shardings = [NamedSharding(mesh, SPECS[i % 3]) for i in range(10)]
    results = [NamedSharding(mesh, P("x")), UNSPECIFIED]
    return lambda: vmap_jit(shardings, results, [(16, 8, 8)] * 10, [2, 2], in_axes=0,
                            result_axes=0, spmd_axis_name=spmd)


def grad_question(mesh: Any) -> Callable[[], Any]:
    shardings = tuple(NamedSharding(mesh, SPECS[i % 3]) for i in range(10))
    equation = JitEquation(shardings, (NamedSharding(mesh, P()),) + shardings[:4],
                           (False,) * 10)
    body = JitBody(inputs=10, dependencies=[set(range(10))] + [{i} for i in range(4)],
                   residuals=10, stored_residuals=10)
    tangents = (True,) * 10

    def answer() -> Any:
        jvp_equation(equation, body, tangents)
        linearized_equations(equation, body, tangents)
        return transposed_equation(equation, body, tangents, (True,) + (False,) * 4)
    return answer


def median_ms(question: Callable[[], Any], repeats: int) -> float:
    question()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        question()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    repeats = 20 if parser.parse_args().quick else 200
    print(f"{'devices':>18}  {'question':<30} {'median':>10}  within {GOAL_MS:g} ms")
    for label, mesh in meshes():
        rows = [("vmap", vmap_question(mesh, None)),
                ("vmap, spmd_axis_name='batch'", vmap_question(mesh, "batch")),
                ("grad (jvp+linearize+transpose)", grad_question(mesh))]
        for name, question in rows:
            ms = median_ms(question, repeats)
            print(f"{label:>18}  {name:<30} {ms:>7.3f} ms  {'yes' if ms <= GOAL_MS else 'NO'}")


if __name__ == "__main__":
    main()
