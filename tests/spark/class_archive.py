"""A class-data archive (Java's AppCDS) of the Spark JVMs the tests start.

A JVM that starts Spark loads thousands of classes from some 250 jars and verifies them:
a session's start and its first reports cost about 5 CPU-s more than with the classes
mapped from an archive that a JVM doing the same work wrote at its exit (docs/testing.md).
`make test` builds the archive once per installed venv (`python -m
tests.spark.class_archive PATH`): a session of the tests' settings runs the fast and the
reference report of the shared journals, then its JVM exits and dumps the classes it
loaded.

`java_options(QUICK_JIT)` adds the archive where it exists; the JVM checks that it was made
by the same Java from the same jars, and runs without it, quietly, where not (`-Xshare:auto`,
its class-sharing log off). Nothing here changes what a test computes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ARCHIVE = Path(__file__).resolve().parents[2] / ".venv" / "spark-classes.jsa"
QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def java_options(base: str, archive: Path = ARCHIVE) -> str:
    """`base`, reading the archive where it exists."""
    if not archive.is_file():
        return base
    return f"{base} -XX:SharedArchiveFile={archive} {QUIET}"


def build(target: Path, base: str) -> None:
    """Run a session as the tests do with `base` options, then have its JVM dump what it
    loaded into `target` (written beside it first, renamed when whole)."""
    from tests.spark.conftest import make_session
    from tests.spark.reference_journal import shared_reports

    partial = target.with_name(f".{target.name}.{os.getpid()}")
    session = make_session(f"{base} -XX:ArchiveClassesAtExit={partial}")
    jvm = session.sparkContext._gateway.proc  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory() as scratch:
        for engine in ("fast", "reference"):
            shared_reports(Path(scratch) / engine, engine)
    session.stop()
    jvm.stdin.close()  # the gateway JVM exits at the end of its input, and dumps then
    if jvm.wait(timeout=300) != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the JVM exited with {jvm.returncode} and wrote no archive")
    partial.replace(target)


def main(argv: list[str]) -> int:
    from tests.spark.conftest import QUICK_JIT, java_missing

    target = Path(argv[0]) if argv else ARCHIVE
    if java_missing():
        print("no Java: no class archive (the Spark tests will be skipped)")
        return 0
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("no PySpark: no class archive (the Spark tests will be skipped)")
        return 0
    try:
        build(target, QUICK_JIT)
    except Exception as exc:  # the tests run without it, only slower
        print(f"no class archive of the Spark JVMs ({exc}): the Spark tests start without it")
        return 0
    print(f"class archive of the Spark JVMs: {target} ({target.stat().st_size >> 20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
