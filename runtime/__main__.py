"""Command line: a thin shell over `Runtime`. `hookstream` ([project.scripts]) and
`python -m runtime` are the same command.

    hookstream CONFIG.toml [--log-format text|json]   run until SIGINT/SIGTERM
    hookstream check CONFIG.toml           validate a config, name the bad key
    hookstream report JOURNAL [--out DIR]  PySpark delivery report and audit
    hookstream status|attempts|pause|resume|replay ...   a running instance's admin API
                                           (runtime/host/console.py)
"""

from __future__ import annotations

import asyncio
import os
import sys

from runtime.errors import BrokerError, ConfigError, StartupError
from runtime.host.config import Config, load_config
from runtime.host.logs import LogFormat, configure
from runtime.host.workers import WORKER_ENV, Workers, apply_worker_env

CONSOLE = ("status", "attempts", "pause", "resume", "replay")
"""Commands that ask a running instance (runtime/host/console.py)."""

USAGE = """\
usage: hookstream CONFIG.toml [--log-format text|json]
       hookstream check CONFIG.toml
       hookstream report JOURNAL_DIR [--out OUT_DIR] [--master URL]
       hookstream status [--failing] [--search TEXT] [--state STATE] [--json]
       hookstream attempts ID GROUP (--offset TOPIC/PARTITION/OFFSET | --webhook-id ID
                                     | --failed) [--json]
       hookstream pause|resume ID GROUP [--json]
       hookstream replay ID GROUP (--dead-letters | --topic TOPIC ...) [--json]

Runs the Kafka-to-webhook runtime described by CONFIG.toml until SIGINT or SIGTERM.
`python -m runtime ...` is the same command.
  check    validate CONFIG.toml and exit non-zero naming the bad key
  report   build the delivery report and loss/duplicate audit from a journal (PySpark)
  status, attempts, pause, resume, replay
           ask a running instance (--url/--token, HOOKSTREAM_URL/HOOKSTREAM_TOKEN, or
           --config CONFIG.toml's [admin]); `hookstream status --help` for each
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


def run(path: str, log_format: LogFormat | None = None) -> int:
    config = _load(path)
    if config is None:
        return 2
    configure(config.runtime.log_level, log_format or config.runtime.log_format)
    if os.environ.get(WORKER_ENV) is not None:
        config = apply_worker_env(config)
    elif config.runtime.workers > 1:
        return run_workers(path, config, ["--log-format", log_format] if log_format else [])
    from runtime.host.app import Runtime

    runner: asyncio.Runner
    if config.runtime.uvloop:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    else:
        runner = asyncio.Runner()
    try:
        with runner:
            runner.run(Runtime(config).run_until_signalled())
    except (StartupError, BrokerError, ConfigError) as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


def run_workers(path: str, config: Config, argv: list[str]) -> int:
    try:
        asyncio.run(Workers(path, config, argv).run())
    except (BrokerError, ConfigError) as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
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
    if command in CONSOLE:
        from runtime.host.console import main as console_main

        return console_main(argv)
    if command == "report":
        from runtime.report import main as report_main

        return report_main(rest)
    log_format: LogFormat | None = None
    if rest[:1] == ["--log-format"] and rest[1:2] in (["text"], ["json"]):
        log_format = "json" if rest[1] == "json" else "text"
        rest = rest[2:]
    if rest:
        print(USAGE, file=sys.stderr)
        return 2
    return run(command, log_format)


def entry() -> None:
    """The `hookstream` console command."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    entry()
