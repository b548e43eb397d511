"""The suite writes nothing into tracked files (issue 27): a digest of every tracked file
that a test could be tempted to rewrite (images, configs, data; not the `.py` and `.md`
files a developer may be editing while the suite runs), taken when the session starts and
compared when it ends."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EDITED_BY_HAND = (".py", ".md")


def tracked_files(root: Path = ROOT) -> list[Path]:
    """Tracked files outside EDITED_BY_HAND; empty outside a git checkout."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                                 check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    names = [name for name in listing.decode().split("\0") if name]
    return [root / name for name in names if not name.endswith(EDITED_BY_HAND)]


def digests(paths: list[Path]) -> dict[Path, str]:
    found: dict[Path, str] = {}
    for path in paths:
        try:
            found[path] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            found[path] = "missing"
    return found


def changed(before: dict[Path, str], root: Path = ROOT) -> list[str]:
    after = digests(list(before))
    return sorted(str(path.relative_to(root)) for path, digest in before.items()
                  if after[path] != digest)
