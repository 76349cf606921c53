"""Layer 5, whole programs: what ``jax.jit`` does with a jit's options and its whole body.

* ``description`` — a program: typed values, constants, equations, nested bodies (PROG-0,
  PROG-1);
* ``lowering`` — what lowering and compiling read from the body: dead code, the shardings
  inside it, the results it places (PROG-2, PROG-4);
* ``explain`` — one entry point, ``explain_program``;
* ``shardmap`` — shard_map equations where JAX checks them (the SMAP rules on their specs,
  operands, results and their bodies' collectives) and the record of what each equation
  decides (``ProgramVerdict.decided``);
* ``batching`` — ``vmap_program``, ``nested_vmap_program``: ``jax.vmap`` of a program, as
  a rewrite of it (``shardmap_batching``: the rules of a shard_map under vmap);
* ``autodiff`` — ``jvp_program``, ``linearize_program``, ``vjp_program``, ``grad_program``,
  ``value_and_grad_program``: differentiation of a program, as rewrites of it.

Standard library only; imports the layers below it.
"""

from .autodiff import (
    LinearizedProgram, VjpProgram, grad_program, jvp_program, linearize_program,
    value_and_grad_program, vjp_program,
)
from .batching import nested_vmap_program, vmap_program
from . import control_flow_ad, control_flow_batching, control_flow_rules  # noqa: F401
from . import cond_ad, custom_rules, while_ad  # noqa: F401
# (the control-flow kinds' rules, registered in every rewrite)
from . import batching_primitives  # noqa: F401  (registers the rules of a step's primitives)
from . import batching_indexing  # noqa: F401  (gathers, scatters, dynamic slices)
from . import batching_folded  # noqa: F401  (convolutions and solves: the batch folded in)
from . import contraction  # noqa: F401  (dot_general's result type, PROG-7)
from . import elementwise_types  # noqa: F401  (an elementwise operation's, PROG-8)
from . import structural_types  # noqa: F401  (a slice's, a cumsum's: PROG-9, PROG-10)
from . import sorted_types  # noqa: F401  (a sort's operands: PROG-14)
from . import scan_length  # noqa: F401  (LOOP-5, which the bridge applies to a scan call)
from . import propagation_spelling  # noqa: F401  (PROP-7: the results as JAX spells them)
from . import propagation_flow  # noqa: F401  (PROP-13: a join a constraint leads)
from . import collectives_explicit  # noqa: F401  (COLL-11, COLL-12: registered on import)
from .partial_eval import dce_program, partial_eval_program

__all__ = ["vmap_program", "nested_vmap_program", "jvp_program", "linearize_program",
           "vjp_program", "grad_program",
           "value_and_grad_program", "LinearizedProgram", "VjpProgram", "dce_program",
           "partial_eval_program"]
