"""Layer 5, whole programs: what ``jax.jit`` does with a jit's options and its whole body.

* ``description`` — a program: typed values, constants, equations, nested bodies (PROG-0,
  PROG-1);
* ``lowering`` — what lowering and compiling read from the body: dead code, the shardings
  inside it, the results it places (PROG-2, PROG-4);
* ``explain`` — one entry point, ``explain_program``.

Standard library only; imports the layers below it.
"""
