"""Print the README's two commands (the sh blocks under "The two commands"), one a line.

CI runs exactly these, so that what a newcomer types is what is tested.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

text = Path(sys.argv[1] if len(sys.argv) > 1 else "README.md").read_text()
section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
commands = [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]
if len(commands) != 2 or any("\n" in c for c in commands):
    raise SystemExit(f"README.md: expected two one-line sh blocks under 'The two commands', "
                     f"found {commands!r}")
print("\n".join(commands))
