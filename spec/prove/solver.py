"""The solver: z3 asked for a device whose box differs under two shardings.

Symbolic (iota) orders become a formula that does not grow with the device count
(``encoding.py``): a pair over 2^20 devices is proved in milliseconds. The free variable is a
position in the first sharding's device list; *unsat* is the proof, *sat* names a position,
and so a device, where the boxes differ.

When the solver is asked for explicit orders (``method="solver"``), the encoder first
cancels what it can: equal device lists need no map at all, and a list that is in fact a
reshape/transpose is recognized as one. What remains is a table: the encoder reads, for
each of the N positions, the tile index each sharding gives it (as the spec's own
enumeration does), and the solver receives one ground instance per position and checks
their boxes. That costs time in proportion to N, and more per device than the direct pass.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import z3

from ..core.values import DeviceList
from ..placement.blocks import box_of
from .answers import Answer, Counterexample, Question, Unknown
from .clock import Clock, ticking
from .direct import answer_naming
from .encoding import (
    BitVectors, Encoder, Integers, Number, Shapes, bit_width, box_terms, boxes_differ,
    position_in_order, shape_terms, sigma,
)
from .orders import (
    Placement, device_ids, first_unshared_device, order_positions, order_values,
    recognize_iota, same_order,
)

# The doors the prover's other modules use; the package's public names are smt.py's.
__all__ = ["solver_answer"]

# Table instances are written and read by the solver this many at a time, so that the time
# limit is looked at between pieces.
TABLE_PIECE = 16_384


# --------------------------------------------------------------------------- the solver's answer

def solver_answer(a: Any, b: Any, pa: Placement, pb: Placement, question: Question,
                  encoding: str, clock: Clock, table_limit: int) -> Answer:
    """The solver's answer: a formula over a position of the first device list, whose
    solutions are the positions where the two placements part. ``table_limit`` is the
    largest explicit table expanded into instances (``smt.TABLE_LIMIT``, read per call)."""
    elapsed = clock.elapsed
    shape, rank, max_dim = question.shape, question.rank, question.max_dim
    clock.check("comparing the device sets")

    # Devices held by one sharding only: no solver needed to name one.
    unshared = first_unshared_device(pa.devices, pb.devices)
    if unshared is not None:
        return answer_naming(pa, pb, question.example, unshared, None, (None, None), "solver",
                             clock)
    clock.check("matching the device orders")
    position = _position_map(pa.devices, pb.devices)
    clock.check("matching the device orders")
    tables = _needs_tables(pa, pb, position)
    if tables and len(pa.devices) > table_limit:
        return Unknown(f"an explicit device order or tile assignment of {len(pa.devices)} "
                       f"entries is larger than the {table_limit} the encoder expands",
                       0.0, elapsed())
    if tables:
        solver, witness = _table_solver(pa, pb, shape, rank, max_dim, position, clock)
    else:
        solver, witness = _symbolic_solver(pa, pb, shape, rank, max_dim, encoding, position)
    clock.check("building the formula")
    result, solver_seconds, reason = _check(solver, max(0.001, clock.left()))
    if result is None:
        return Unknown(reason, solver_seconds, elapsed())
    if result == z3.unsat:
        return question.proved(clock, "solver", tables, solver_seconds)
    found = witness(solver.model())
    if found is None:
        return Unknown("the solver found a block of positions where the placements differ, "
                       "but no position in it on a second look", solver_seconds, elapsed())
    p, found_shape = found
    device = pa.devices.id_at(p)
    box_a, box_b = box_of(a, found_shape, device), box_of(b, found_shape, device)
    if box_a == box_b:  # the formula and IDX-1 disagree: an encoding bug, said as such
        return Unknown(f"internal: the solver named device {device} for shape {found_shape}, "
                       f"but box_of gives it {box_a} under both", solver_seconds, elapsed())
    return Counterexample(device, box_a, box_b, found_shape, solver_seconds, elapsed(), tables,
                          "solver")


# --------------------------------------------------------------------------- the device orders

def _position_map(a: DeviceList, b: DeviceList) -> tuple[str, Any]:
    """How a position in ``a`` becomes the position of the same device in ``b``.

    ``("identity", None)``, ``("iotas", (a_iota, b_iota))`` (b's inverse after a),
    ``("iota", order)`` (a table recognized as a reshape/transpose) or ``("table", values)``.
    """
    if same_order(a, b):
        return "identity", None
    if a.iota is not None and b.iota is not None:
        return "iotas", (a.iota, b.iota)
    where_in_b: Any
    if b.iota is not None:
        where_in_b = order_positions(b.iota)
    else:
        where_in_b = {device: p for p, device in
                      enumerate(ticking(b.ids(), "matching the device orders"))}
    table = tuple(where_in_b[device] for device in
                  ticking(device_ids(a), "matching the device orders"))
    order = recognize_iota(table)
    return ("iota", order) if order is not None else ("table", table)


# --------------------------------------------------------------------------- solving

def _check(solver: Any, timeout_s: float) -> tuple[Any, float, str]:
    """Run the solver; ``(result, seconds, reason)`` with result None on failure."""
    solver.set("timeout", max(1, int(timeout_s * 1000)))
    start = time.perf_counter()
    try:
        result = solver.check()
    except z3.Z3Exception as error:  # the solver's own failure is an honest unknown
        return None, time.perf_counter() - start, f"the solver failed: {error}"
    seconds = time.perf_counter() - start
    if result == z3.unknown:
        return None, seconds, f"the solver gave up: {solver.reason_unknown()}"
    return result, seconds, ""


_TACTIC: list[Any] = []


def _bit_vector_solver() -> Any:
    """Simplify (multiplications by powers of two become bit shifts), solve the digits'
    equations, and hand the rest to a SAT solver: measured fastest on these formulas."""
    if not _TACTIC:  # built once: building it costs as much as a small proof
        _TACTIC.append(z3.Then(z3.With("simplify", mul2concat=True), "propagate-values",
                               "solve-eqs", "bit-blast", "sat"))
    return _TACTIC[0].solver()


def _symbolic_solver(a: Placement, b: Placement, shape: tuple[int, ...] | None, rank: int,
                     max_dim: int, encoding: str, position: tuple[str, Any]
                     ) -> tuple[Any, Callable[[Any], tuple[int, tuple[int, ...]] | None]]:
    """The formula when every order is an iota: no table, independent of the device count."""
    n = len(a.devices)
    width = bit_width(n, shape, max_dim)
    arithmetic = Integers() if encoding == "integer" else BitVectors(width)
    enc = Encoder(arithmetic, use_digits=encoding == "digits")
    p = enc.free(n, "position")
    shapes = shape_terms(shape, rank, max_dim, a, b, enc)
    q = sigma(*position, p, enc)
    tile_a = None if a.tiled is None else position_in_order(a.order, p, enc)
    tile_b = None if b.tiled is None else position_in_order(b.order, q, enc)
    differs = boxes_differ(box_terms(a, tile_a, shapes.sizes, shapes.pieces(a, arithmetic), enc),
                           box_terms(b, tile_b, shapes.sizes, shapes.pieces(b, arithmetic), enc))
    solver = _bit_vector_solver() if encoding != "integer" else z3.Solver()
    solver.add(*enc.constraints, differs)

    def witness(model: Any) -> tuple[int, tuple[int, ...]]:
        found = shape if shape is not None else tuple(
            model.eval(v, model_completion=True).as_long() for v in shapes.variables)
        return enc.value(model, p), found

    return solver, witness


def _tile_table(placement: Placement, positions: list[int]) -> list[int]:
    """The tile index of each position listed (read from the tile assignment)."""
    tiled = placement.tiled
    if tiled is None:
        return [0] * len(positions)
    if placement.order is not None:
        tile_of = order_positions(placement.order)
    else:
        tile_of = [0] * len(tiled.assignment)
        for t, q in enumerate(ticking(tiled.assignment, "reading a tile assignment")):
            tile_of[q] = t
    return [tile_of[q] for q in ticking(positions, "reading a tile table")]


def _table_solver(a: Placement, b: Placement, shape: tuple[int, ...] | None, rank: int,
                  max_dim: int, position: tuple[str, Any], clock: Clock
                  ) -> tuple[Any, Callable[[Any], tuple[int, tuple[int, ...]] | None]]:
    """The formula when a device order or a tile assignment is an explicit table.

    One ground instance per position of the first device list: the tile index each
    sharding gives that position (read from the tables), and the solver checks that the
    two tiles give the same box. The instances come in blocks of about sqrt(N) positions,
    and a solution names only the block; a second, small formula over that block's
    positions names the device.
    """
    n = len(a.devices)
    width = bit_width(n, shape, max_dim)
    arithmetic = BitVectors(width)
    enc = Encoder(arithmetic, use_digits=False)
    shapes = shape_terms(shape, rank, max_dim, a, b, enc)
    tile_a, tile_b = z3.BitVec("tile_a", width), z3.BitVec("tile_b", width)
    differs = boxes_differ(
        box_terms(a, Number(term=tile_a), shapes.sizes, shapes.pieces(a, arithmetic), enc),
        box_terms(b, Number(term=tile_b), shapes.sizes, shapes.pieces(b, arithmetic), enc))
    clock.check("reading the first sharding's tile table")
    tiles_a = _tile_table(a, list(range(n)))
    clock.check("reading the second sharding's tile table")
    tiles_b = _tile_table(b, _positions_in_b(position, n))
    clock.check("writing the table instances")
    text = _TableText(differs, tiles_a, tiles_b, width, shapes.variables)
    pieces = _table_pieces(text, clock)
    solver = z3.SolverFor("QF_BV")
    solver.add(*enc.constraints)
    solver.add(z3.Or(pieces))

    def witness(model: Any) -> tuple[int, tuple[int, ...]] | None:
        return _position_in_block(model, text, shape, shapes, enc, clock)

    return solver, witness


class _TableText:
    """The ground instances of a table as SMT-LIB text, a block of positions to a term
    guarded by the block's number (the number is all a first solution names)."""

    def __init__(self, differs: Any, tiles_a: list[int], tiles_b: list[int], width: int,
                 shape_variables: list[Any]) -> None:
        self.tiles_a, self.tiles_b = tiles_a, tiles_b
        self.n = len(tiles_a)
        self.block = max(1, math.isqrt(self.n))
        self.count = -(-self.n // self.block)
        self.hex_digits = width // 4
        sort = f"(_ BitVec {width})"
        self.known = {str(v): v for v in shape_variables}
        self.known["block"] = z3.BitVec("block", width)
        self.known["position"] = z3.BitVec("position", width)
        # Declared once as a function, so each instance is a short call, not the whole box
        # comparison written out again.
        self.prelude = (f"(define-fun differs ((tile_a {sort}) (tile_b {sort})) Bool "
                        f"{z3.simplify(differs, mul2concat=True).sexpr()})")

    def literal(self, value: int) -> str:
        return f"#x{value:0{self.hex_digits}x}"

    def instances(self, first: int, last: int, guarded: bool) -> str:
        """Positions ``first`` to ``last - 1``; ``guarded`` ties each to its ``position``,
        for the second formula that names the device."""
        literal, tiles_a, tiles_b = self.literal, self.tiles_a, self.tiles_b
        if guarded:
            return "".join(f" (and (= position {literal(i)}) (differs {literal(tiles_a[i])} "
                           f"{literal(tiles_b[i])}))" for i in range(first, last))
        return "".join(f" (differs {literal(tiles_a[i])} {literal(tiles_b[i])})"
                       for i in range(first, last))

    def blocks(self, first_block: int, last_block: int) -> str:
        size = self.block
        return "".join(
            f" (and (= block {self.literal(k)}) "
            f"(or false{self.instances(k * size, min((k + 1) * size, self.n), False)}))"
            for k in range(first_block, min(last_block, self.count)))

    def parse(self, disjuncts: str) -> Any:
        return z3.parse_smt2_string(f"{self.prelude}(assert (or false{disjuncts}))",
                                    decls=self.known)


def _table_pieces(text: _TableText, clock: Clock) -> list[Any]:
    """The blocks' terms, for a solver to take as one disjunction."""
    # Written and parsed a piece at a time, so that the clock is read between pieces.
    step = max(1, TABLE_PIECE // text.block)
    pieces = []
    since = time.perf_counter()
    for done, first_block in enumerate(range(0, text.count, step)):
        clock.pace("writing the table instances", done, -(-text.count // step), since)
        pieces.extend(text.parse(text.blocks(first_block, first_block + step)))
    return pieces


def _position_in_block(model: Any, text: _TableText, shape: tuple[int, ...] | None,
                       shapes: Shapes, enc: Encoder, clock: Clock
                       ) -> tuple[int, tuple[int, ...]] | None:
    """The position, in the block a solution names, where the placements differ for the
    shape the solution found; None when the second look finds none."""
    found = shape if shape is not None else tuple(
        model.eval(v, model_completion=True).as_long() for v in shapes.variables)
    first = model.eval(text.known["block"], model_completion=True).as_long() * text.block
    inner = z3.SolverFor("QF_BV")
    inner.add(*enc.constraints, *[v == enc.arithmetic.const(k)
                                  for v, k in zip(shapes.variables, found)])
    inner.add(text.parse(text.instances(first, min(first + text.block, text.n), True)))
    result, _, _ = _check(inner, max(0.001, clock.left()))
    if result != z3.sat:
        return None
    return inner.model().eval(text.known["position"], model_completion=True).as_long(), found


def _positions_in_b(position: tuple[str, Any], n: int) -> list[int]:
    """Where each position of the first device list stands in the second, as a list."""
    kind, data = position
    if kind == "identity":
        return list(range(n))
    if kind == "table":
        return list(data)
    if kind == "iota":
        return order_values(data)
    a_order, b_order = data
    where_in_b = order_positions(b_order)
    return [where_in_b[v] for v in ticking(order_values(a_order), "matching the device orders")]


def _needs_tables(a: Placement, b: Placement, position: tuple[str, Any]) -> bool:
    if position[0] == "table":
        return True
    return any(p.tiled is not None and p.order is None for p in (a, b))
