"""Every recipe in docs/recipes.md runs here, as written, where its toolchain is installed.

Each recipe is a ``sh`` block preceded by an HTML comment naming it, the shell condition
that says its toolchain is installed (`needs`), why it is skipped when not (`unmet`), and
a line its output must contain (`expect`). The block runs with bash in a fresh directory
(the project, and panday's default workspace) with the installed `panday` first on PATH,
the real HOME (where the toolchains are) and an empty $XDG_CONFIG_HOME. Each recipe
prints its `expect` line from inside the jail, so it passes only if the staged toolchain
really ran there.

Positive control for the recipes' premise: the same toolchain, not staged, is not found
inside (exit 127 naming what to stage); see test_session.py's toolchain tests.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from panday import tiers

REPO = Path(__file__).resolve().parents[3]
RECIPES = REPO / "docs" / "recipes.md"
_BLOCK = re.compile(r"<!-- recipe\n(?P<meta>.*?)-->\n\n```sh\n(?P<script>.*?)```", re.DOTALL)


class Recipe(NamedTuple):
    name: str
    needs: str
    unmet: str
    expect: str
    script: str


def recipes() -> list[Recipe]:
    found: list[Recipe] = []
    for match in _BLOCK.finditer(RECIPES.read_text(encoding="utf-8")):
        meta: dict[str, str] = {}
        for line in match["meta"].strip().splitlines():
            key, _, value = line.partition(":")
            meta[key.strip()] = value.strip()
        found.append(
            Recipe(meta["name"], meta["needs"], meta["unmet"], meta["expect"], match["script"])
        )
    return found


def test_the_recipes_are_found() -> None:
    names = [r.name for r in recipes()]
    assert {"venv", "pyenv", "uv-python", "uv-run", "nvm", "rustup"} <= set(names)
    assert len(set(names)) == len(names)
    # Every sh block in the file is a recipe: none can be left out of the tests by mistake.
    assert RECIPES.read_text(encoding="utf-8").count("```sh\n") == len(names)


def _env(tmp_path: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # the installed `panday` console script
    config = tmp_path / "config"
    config.mkdir()
    # As a user's shell would be: no virtual environment active (pytest runs in one).
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_CONFIG_HOME"] = str(config)
    return env


def _run_recipe(recipe: Recipe, env: dict[str, str], tmp_path: Path) -> None:
    """Run `recipe` as written in a fresh project directory (skipped, with its reason, where
    its toolchain is missing); its last line must be what it expects."""
    project = tmp_path / "project"
    project.mkdir()
    needs = subprocess.run(
        ["bash", "-c", recipe.needs],
        cwd=project, env=env, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    if needs.returncode != 0:
        pytest.skip(recipe.unmet)
    done = subprocess.run(
        ["bash", "-e", "-c", recipe.script],
        cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert recipe.expect in done.stdout.splitlines()[-1], done.stdout + done.stderr


@pytest.mark.skipif(
    tiers.host_command_tier() != "t2-linux", reason="the recipes are for T2 Linux's jail"
)
@pytest.mark.parametrize("recipe", recipes(), ids=lambda r: r.name)
def test_recipe(recipe: Recipe, tmp_path: Path) -> None:
    env = _env(tmp_path)
    _run_recipe(recipe, env, tmp_path)


@pytest.mark.skipif(
    tiers.host_command_tier() != "t2-linux", reason="the recipes are for T2 Linux's jail"
)
@pytest.mark.parametrize("name", ["venv", "uv-run"])
def test_python_recipes_under_the_distributions_own_python(name: str, tmp_path: Path) -> None:
    """Issue 27, 4: with Debian's (or Ubuntu's) /usr/bin/python3 first on PATH, a venv's
    ``sys.base_prefix`` is ``/usr``, which the recipes stage: the jail shows it already."""
    system = Path("/usr/bin/python3")
    base = subprocess.run(
        [str(system), "-c", "import sys, venv; print(sys.base_prefix)"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert base.returncode == 0, f"inconclusive: {system} with venv is missing: {base.stderr}"
    assert base.stdout.strip() == "/usr", f"inconclusive: {system} is not the distribution's"
    [recipe] = [r for r in recipes() if r.name == name]
    env = _env(tmp_path)
    env["PATH"] = f"/usr/bin:/bin:{env['PATH']}"
    _run_recipe(recipe, env, tmp_path)
