"""Command line: a thin shell over `Runtime`.

    python -m runtime CONFIG.toml                 run until SIGINT/SIGTERM
    python -m runtime check CONFIG.toml           validate a config, name the bad key
    python -m runtime report JOURNAL --out DIR    PySpark delivery report and audit
"""

from __future__ import annotations

import asyncio
import logging
import sys

from runtime.errors import ConfigError
from runtime.host.config import Config, load_config

USAGE = """\
usage: python -m runtime CONFIG.toml
       python -m runtime check CONFIG.toml
       python -m runtime report JOURNAL_DIR --out OUT_DIR [--master URL]

Runs the Kafka-to-webhook runtime described by CONFIG.toml until SIGINT or SIGTERM.
  check    validate CONFIG.toml and exit non-zero naming the bad key
  report   build the delivery report and loss/duplicate audit from a journal (PySpark)
"""


def _load(path: str) -> Config | None:
    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return None


def check(path: str) -> int:
    config = _load(path)
    if config is None:
        return 2
    levels = len(config.delay.levels)
    print(f"{path}: ok ({len(config.brokers)} broker(s), {levels} delay level(s), "
          f"admin on {config.admin.listen})")
    return 0


def run(path: str) -> int:
    config = _load(path)
    if config is None:
        return 2
    logging.basicConfig(level=config.runtime.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from runtime.host.app import Runtime

    runner: asyncio.Runner
    if config.runtime.uvloop:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    else:
        runner = asyncio.Runner()
    with runner:
        runner.run(Runtime(config).run_until_signalled())
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "check":
        if len(rest) != 1:
            print(USAGE, file=sys.stderr)
            return 2
        return check(rest[0])
    if command == "report":
        from runtime.report import main as report_main

        return report_main(rest)
    if len(argv) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    return run(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
