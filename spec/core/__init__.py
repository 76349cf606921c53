"""Layer 1, the core: the value types every rule speaks of, and the rule registry.

* ``rules`` — ``@rule``, the registry (``RULES``), failures and rejections, traces;
* ``dims``, ``iota`` — checked integers and dimension lists; iota device orders;
* ``values`` — devices, meshes, partition specs (VAL rules);
* ``hlo`` — HLO shardings: canonical form, text, parsing (HLO rules);
* ``shardings`` — NamedSharding, GSPMDSharding, SingleDeviceSharding (NS rules);
* ``pytree`` — pytree structures and paths, as jit reads its arguments.

Standard library only; imports nothing above it.
"""
