"""shardlaw as users install it: the built wheel holds every package, and the spec's
commands run with no JAX.

The wheel is built from a copy of the files the build reads (pyproject.toml, setup.py,
README.md, LICENSE and the four package folders), so the checkout is left as it was;
``.ci/run`` builds the real sdist and wheel, installs the wheel into a fresh virtual
environment and runs this suite against it (``SHARDLAW_EXPECT_INSTALLED=1``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from pathlib import Path

import shardlaw

ROOT = Path(__file__).resolve().parent.parent
FOLDERS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())[
    "tool"]["setuptools"]["package-dir"]


def _modules_in_tree() -> dict[str, Path]:
    """Every ``.py`` file under the four folders, by its path inside an installed shardlaw."""
    found = {}
    for package, folder in FOLDERS.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            inside = Path(*package.split(".")) / path.relative_to(base)
            found[inside.as_posix()] = path
    return found


def test_every_folder_of_modules_is_a_package():
    """Discovery finds a folder by its ``__init__.py``: a folder of modules without one
    would be left out of the wheel."""
    folders = {path.parent for path in _modules_in_tree().values()}
    assert sorted(str(f.relative_to(ROOT)) for f in folders
                  if not (f / "__init__.py").is_file()) == []


def test_the_wheel_holds_every_package_module_and_the_typing_marker(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    for folder in FOLDERS.values():
        shutil.copytree(ROOT / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                           "-w", str(tmp_path / "dist"), str(source)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("shardlaw-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert sorted(set(_modules_in_tree()) - names) == []
    assert "shardlaw/py.typed" in names and f"{info}/licenses/LICENSE" in names
    assert "License-Expression: Apache-2.0" in metadata
    assert "Classifier: Typing :: Typed" in metadata
    assert "shardlaw = shardlaw.cli:main" in entry_points
    assert "shardlaw = shardlaw.pytest_plugin" in entry_points


# The spec's commands in a process where JAX, numpy, Hypothesis and z3 cannot be imported
# (as after `pip install shardlaw`, no extras).
_WITHOUT_EXTRAS = """
    import sys
    for name in ("jax", "jaxlib", "numpy", "hypothesis", "z3", "xdist"):
        sys.modules[name] = None          # import raises ImportError
    from shardlaw.cli import main
    sys.exit(main(sys.argv[1:]))
"""


def _without_extras(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(_WITHOUT_EXTRAS), *argv],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def test_the_spec_commands_run_without_jax(tmp_path):
    version = _without_extras("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"shardlaw {shardlaw.__version__}"
    helped = _without_extras("--help", cwd=tmp_path)
    assert helped.returncode == 0 and "campaign" in helped.stdout
    rules = _without_extras("rules", cwd=tmp_path)
    assert rules.returncode == 0 and "DIV-1" in rules.stdout, rules.stderr[-2000:]
    demo = _without_extras("demo", cwd=tmp_path)
    assert demo.returncode == 0 and "rejected by DA-1" in demo.stdout, demo.stderr[-2000:]
    vector = sorted((ROOT / "vectors" / "jit" / "DA-1").glob("*.json"))[0]
    checked = _without_extras("check", str(vector), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    assert "DA-1" in checked.stdout and "Traceback" not in checked.stderr


def test_what_needs_jax_says_so_in_one_line(tmp_path):
    campaign = _without_extras("campaign", "--suite", "placement", "--examples", "5",
                               cwd=tmp_path)
    assert campaign.returncode == 2 and "Traceback" not in campaign.stderr
    assert campaign.stderr.strip() == ("shardlaw: a campaign needs pytest-xdist, hypothesis, "
                                       "jax, not installed here; install shardlaw with the "
                                       "[dev] extra")
    proved = _without_extras("prove", "mesh=2x4:x,y spec=x,y", "gspmd:{devices=[2,4]<=[8]}",
                             "--shape", "8,8", cwd=tmp_path)
    assert proved.returncode == 2 and "Traceback" not in proved.stderr
    assert "needs z3" in proved.stderr
    generated = _without_extras("vectors", "generate", str(tmp_path / "out"), cwd=tmp_path)
    assert generated.returncode == 2 and "Traceback" not in generated.stderr
    assert "needs JAX and Hypothesis" in generated.stderr


def test_shardlaw_is_imported_from_one_install():
    """The four parts come from one place: the checkout's folders (an editable install)
    or one site-packages (a wheel; CI's wheel leg sets SHARDLAW_EXPECT_INSTALLED=1)."""
    import shardlaw.engine
    import shardlaw.properties
    import shardlaw.spec
    where = {name: Path(sys.modules[name].__file__).resolve().parent
             for name in ("shardlaw", "shardlaw.spec", "shardlaw.engine", "shardlaw.properties")}
    if os.environ.get("SHARDLAW_EXPECT_INSTALLED") == "1":
        site = Path(sysconfig.get_paths()["purelib"]).resolve()
        assert {name: path.parent for name, path in where.items()} == {
            "shardlaw": site, "shardlaw.spec": site / "shardlaw",
            "shardlaw.engine": site / "shardlaw", "shardlaw.properties": site / "shardlaw"}
        assert not any(path.is_relative_to(ROOT) for path in where.values())
    else:
        assert where == {name: (ROOT / folder).resolve() for name, folder in FOLDERS.items()}
