"""Print pip constraints that hold every dependency of shardlaw[dev] at its lower bound.

CI's second leg installs with these, so that a bound in pyproject.toml is a tested promise:
``name>=X`` becomes ``name==X`` and ``name==X`` stays. A dependency with no lower bound is
refused, since no one could say which oldest version it promises.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


def oldest(requirement: str) -> str:
    match = REQUIREMENT.match(requirement)
    if not match:
        raise SystemExit(f"cannot read the requirement {requirement!r}")
    name, _, bounds = match.groups()
    for bound in (b.strip() for b in bounds.split(";")[0].split(",")):
        if bound.startswith(("==", ">=")):
            return f"{name}=={bound[2:].strip()}"
    raise SystemExit(f"{name!r} has no lower bound in pyproject.toml ({requirement!r}): "
                     "write the oldest version the project promises to work with")


def main() -> None:
    project = tomllib.loads(Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml")
                            .read_text())["project"]
    wanted = project.get("dependencies", []) + project["optional-dependencies"]["dev"]
    print("\n".join(sorted(set(oldest(r) for r in wanted))))


if __name__ == "__main__":
    main()
