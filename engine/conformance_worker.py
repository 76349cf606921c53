"""What every process of a multiprocess conformance run executes: set-up, then JAX's test file.

JAX's multiprocess launcher (``jax._src.test_multiprocess``) starts each worker as
``<python> <argv[0]> <flags>``, so this file is ``argv[0]``: the launcher process and each
of its N workers run it. It reads what it needs from the environment, which the launcher
passes on unchanged:

* ``SHARDLAW_CONFORMANCE``: ``engine`` puts the engine in place of ``jax.jit`` (and pjit)
  before the test file is imported; ``jax`` leaves JAX as it is (the baseline);
* ``SHARDLAW_CONFORMANCE_FILE``: the test file, run as ``__main__`` (with ``sys.argv[0]``
  still this file, so that the launcher starts its workers through it);
* ``SHARDLAW_CONFORMANCE_RESULTS``: a folder where worker ``i`` writes its absltest XML
  report as ``worker_<i>.xml`` (absltest reads ``XML_OUTPUT_FILE``).

Run by :func:`shardlaw.engine.conformance.run_multiprocess_file`, not by hand.
"""

import os
import sys

# Run as a script, this file's folder comes first on sys.path, and the engine's module
# names (statistics, cache, ...) would hide the standard library's: take it off first.
_HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:
    del sys.path[0]
# The launcher starts workers as /proc/self/exe, the real interpreter, not a virtual
# environment's: its packages come through PYTHONPATH, where no .pth file is read, and an
# editable install of shardlaw is one. Read those of every site-packages folder on the path.
if "shardlaw" not in sys.modules:
    import site

    for _folder in list(sys.path):
        if os.path.basename(_folder) in ("site-packages", "dist-packages"):
            site.addsitedir(_folder)

import re  # noqa: E402 - after the path is cleaned
import types  # noqa: E402

_WORKER_FLAG = re.compile(r"^--multiprocess_test_worker_id=(-?\d+)$")


def worker_id(argv: list[str]) -> int:
    """The worker's number from the launcher's flag (-1 in the launcher itself)."""
    for arg in argv:
        match = _WORKER_FLAG.match(arg)
        if match:
            return int(match.group(1))
    return -1


def main() -> None:
    mode = os.environ.get("SHARDLAW_CONFORMANCE", "jax")
    test_file = os.environ.get("SHARDLAW_CONFORMANCE_FILE", "")
    results = os.environ.get("SHARDLAW_CONFORMANCE_RESULTS", "")
    if mode not in ("jax", "engine"):
        raise SystemExit(f"SHARDLAW_CONFORMANCE must be 'jax' or 'engine', not {mode!r}")
    if not os.path.isfile(test_file):
        raise SystemExit(f"SHARDLAW_CONFORMANCE_FILE names no file: {test_file!r}")
    number = worker_id(sys.argv)
    if number >= 0 and results:
        os.environ["XML_OUTPUT_FILE"] = os.path.join(results, f"worker_{number}.xml")
    if mode == "engine":
        from shardlaw.engine import install

        install()
        if number >= 0 and results:
            _count_engine_work(os.path.join(results, f"worker_{number}.engine.json"))
    if number >= 0 and results:
        _say_which_jit(os.path.join(results, f"worker_{number}.jit"))
    sys.path.insert(0, os.path.dirname(os.path.abspath(test_file)))
    run_as_main(test_file)


def _say_which_jit(path: str) -> None:
    """Write which jit this process's tests get, for the runner to check against the mode:
    a run that claims the engine but tests JAX (or the reverse) measures nothing."""
    import jax

    from shardlaw.engine import jit, pjit
    from jax._src import pjit as pjit_module

    engine = jax.jit is jit and pjit_module.pjit is pjit
    with open(path, "w", encoding="utf-8") as out:
        out.write("engine" if engine else "jax")


def _count_engine_work(path: str) -> None:
    """Count what reaches the engine in this process (its executable-cache lookups, the
    pjit functions it makes) and write it at exit: the report's evidence that the tests'
    calls went through the engine, not around it."""
    import atexit
    import json

    from shardlaw.engine import adopt
    from shardlaw.engine.cache import CACHE

    counts = {"executable_lookups": 0, "pjit_functions": 0}
    lookup, make_pjit = CACHE.get_or_compile, adopt.PjitFunction.__init__

    def counted_lookup(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - a pass-through
        counts["executable_lookups"] += 1
        return lookup(*args, **kwargs)

    def counted_pjit(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        counts["pjit_functions"] += 1
        make_pjit(self, *args, **kwargs)

    CACHE.get_or_compile = counted_lookup
    adopt.PjitFunction.__init__ = counted_pjit

    def write() -> None:
        with open(path, "w", encoding="utf-8") as out:
            json.dump(counts, out)
    atexit.register(write)


def run_as_main(path: str) -> None:
    """Run a file as ``__main__`` with ``sys.argv[0]`` left as this file.

    ``runpy.run_path`` would set ``sys.argv[0]`` to the test file, and the launcher, which
    starts its workers from ``sys.argv[0]``, would start them without this set-up.
    """
    with open(path, encoding="utf-8") as source:
        code = compile(source.read(), path, "exec")
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    exec(code, module.__dict__)  # noqa: S102 - running the test file is the point


if __name__ == "__main__":
    main()
