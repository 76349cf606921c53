"""The two records the stages of deciding a call share: what they read, and what they write.

* :class:`StageContext` — what the stages read of the jitted function, and nothing more:
  jit's options, JAX's own jit of the function (which traces it), the function's token in
  the executable cache and its counters. Every stage (:mod:`.stages`) and the plan
  (:mod:`.dispatch_plan`) take this, never the whole :class:`~.function_engine.Engine`
  (its signature cache, its dispatcher, its locks are the engine's own business);
* :class:`CallDecision` — what the stages found so far about one call.

Neither knows the engine or the stages, so the modules that do import this one and
nothing imports back.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

from .call_arguments import CallArguments
from .options import Options
from .resolution import Input, Source
from .rules import EngineRejection, reject
from .shardings import UNSPECIFIED
from .statistics import Counters

__all__ = ["StageContext", "CallDecision", "jax_jit_of"]


def jax_jit_of(fun: Callable, options: Options, jax_api: Callable, out_shardings: Any) -> Any:
    """JAX's own jit (``jax_api``: jax.jit, or pjit) of ``fun`` with jit's ``options`` and
    ``out_shardings``; options JAX's jit refuses are ENG-4, in its class."""
    o = options
    kwargs: dict[str, Any] = dict(
        **o.given_argnums, keep_unused=o.keep_unused, device=o.device, backend=o.backend,
        inline=o.inline, compiler_options=o.compiler_options)
    if o.in_shardings is not UNSPECIFIED:
        kwargs["in_shardings"] = o.in_shardings
    if out_shardings is not UNSPECIFIED:
        kwargs["out_shardings"] = out_shardings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return jax_api(fun, **kwargs)
        except EngineRejection:
            raise
        except (ValueError, TypeError) as error:
            raise reject("ENG-4", type(error) if type(error) in (ValueError, TypeError)
                         else ValueError, f"jax.jit refuses these options: {error}") from None


class StageContext:
    """What the stages of deciding a call read of its jitted function: jit's options, JAX's
    own jit of it (``inner``), its executable-cache token and its counters.

    It holds nothing that refers back to the engine, so a jitted function and its engine
    still go as soon as the last reference to them does.
    """

    __slots__ = ("options", "inner", "token", "counters", "_fun", "_jax_api", "_open")

    def __init__(self, fun: Callable, options: Options, jax_api: Callable, token: int,
                 counters: Counters) -> None:
        self.options = options
        self.token = token
        self.counters = counters
        self._fun = fun
        self._jax_api = jax_api
        self._open: Any = None
        self.inner = jax_jit_of(fun, options, jax_api, options.out_shardings)

    def jax_jit_without_out_shardings(self) -> Any:
        """JAX's own jit of the function with out_shardings left out (made when first asked)."""
        if self._open is None:
            self._open = jax_jit_of(self._fun, self.options, self._jax_api, UNSPECIFIED)
        return self._open


class CallDecision:
    """The engine's record of one call being decided: what each stage found so far."""

    def __init__(self, arguments: CallArguments) -> None:
        self.arguments = arguments
        self.context: Any = None
        self.target: Any = None
        self.jit_in: list[Any] = []
        self.in_layouts: list[Any] = []
        self.out_layouts: list[Any] = []
        self.out_tree_shardings: Any = UNSPECIFIED
        self.traced: Any = None
        self.out_paths: list[str] = []
        self.out_flat: list[Any] = []
        self.in_avals: list[Any] = []    # the call's own arguments as the program types them
        self.out_avals: list[Any] = []
        self.inputs: list[Input] = []
        self.resolved: list[Any] = []
        self.kept: tuple[int, ...] = ()
        self.assignment: tuple = ()
        self.count = 0
        self.final: list[Any] = []
        self.committed = False
        self.inside: tuple[Source, ...] = ()   # the shardings inside the body (PROG-2)
        self.refs: tuple[Any, ...] = ()        # the closed-over refs that take part (REF-1)
        self.constants: tuple[Any, ...] = ()   # hoisted committed constants (CONST-2)
        self.compiler_options: dict[str, Any] | None = None   # given to Lowered.compile
