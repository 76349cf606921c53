"""Replay Shardy's propagation from Python (session 21, carrysq): jaxlib 0.10.2's MLIR
bindings register the sdy passes, so a StableHLO module with an ``sdy.mesh`` can be
propagated without compiling, and ``debug-propagation-edge-sharding`` numbers each change
(``step-N``) on the op that made it.

Shows (1) the carrysq loop written as XLA hands it to Shardy (the loop body reading the
xs argument directly): the carry comes back ``[{"x", "y"}, {}]`` when the xs argument has
one use and ``[{"x"}, {"y", "z"}]`` when it is also returned, as jax.jit gives; (2) the
root: in the first op-priority pass an elementwise op reading a value of two uses does
not move (``sin``/``cos`` of one ``s`` change after the end-of-pass func-result step).
usage: python notes/probes/shardy_replay.py"""
import re

import jax
from jax._src.interpreters import mlir as jax_mlir
from jaxlib.mlir import ir, passmanager

jax.config.update("jax_num_cpu_devices", 8)

MESH = 'sdy.mesh @mesh = <["x"=2, "y"=2, "z"=2]>'


def propagate(func_text: str, pipeline: str = "sdy-propagation-pipeline") -> str:
    """The module ``func_text`` (one func over @mesh) after ``pipeline``."""
    with jax_mlir.make_ir_context():
        module = ir.Module.parse("module {\n" + MESH + "\n" + func_text + "\n}")
        manager = passmanager.PassManager.parse(f"builtin.module({pipeline})")
        manager.enable_verifier(False)   # (the debug attribute fails it on a data-flow edge)
        manager.run(module.operation)
        return module.operation.get_asm(assume_verified=True)


def loop(xs_returned: bool) -> str:
    extra_ty = ", tensor<4x4x4xf32>" if xs_returned else ""
    extra = ", %arg1" if xs_returned else ""
    return f"""
  func.func public @main(%arg0: tensor<4x4xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{"y", "z"}}]>}},
                         %arg1: tensor<4x4x4xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"z"}}, {{"x", "y"}}, {{}}]>}})
      -> (tensor<4x4xf32>{extra_ty}) {{
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %r:2 = stablehlo.while(%i = %zero, %c = %arg0) : tensor<i32>, tensor<4x4xf32>
    cond {{
      %n = stablehlo.constant dense<4> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }} do {{
      %z = stablehlo.constant dense<0> : tensor<i32>
      %ds = stablehlo.dynamic_slice %arg1, %i, %z, %z, sizes = [1, 4, 4] : (tensor<4x4x4xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x4x4xf32>
      %t = stablehlo.reshape %ds : (tensor<1x4x4xf32>) -> tensor<4x4xf32>
      %s = stablehlo.sine %c : tensor<4x4xf32>
      %next = stablehlo.add %s, %t : tensor<4x4xf32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %i2 = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %i2, %next : tensor<i32>, tensor<4x4xf32>
    }}
    return %r#1{extra} : tensor<4x4xf32>{extra_ty}
  }}"""


FORK = """
  func.func public @main(%arg1: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>},
                         %arg2: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"y"}]>})
      -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
    %s = stablehlo.negate %arg1 : tensor<8xf32>
    %a = stablehlo.sine %s : tensor<8xf32>
    %b = stablehlo.cosine %s : tensor<8xf32>
    %q = stablehlo.negate %arg2 : tensor<8xf32>
    return %a, %b, %q : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  }"""


def main() -> None:
    for returned in (False, True):
        out = propagate(loop(returned))
        head = [line for line in out.splitlines() if "func.func public" in line][0]
        found = re.findall(r"sdy.sharding<@mesh, (\[[^>]*\])>", head[head.index("->"):])
        print("xs returned" if returned else "xs read by the loop alone", "-> carry", found[0])
    out = propagate(FORK, "sdy-import-pipeline,"
                    "sdy-op-priority-propagate{debug-propagation-edge-sharding=true}")
    for line in out.splitlines():
        op = re.search(r"stablehlo\.\w+|func\.func", line)
        steps = re.findall(r"step-\d+", line)
        if op and steps:
            print(op.group(0), steps)


if __name__ == "__main__":
    main()
