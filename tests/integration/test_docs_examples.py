"""Every code example in README.md and docs/ (issue 36): shell blocks run (README's and
the console's, elsewhere: `RUN_ELSEWHERE`) or parse (`hookstream report` lines); Python
blocks are complete programs (no top-level `await`, nothing undefined at import) and the
library page's run as written, with the config.toml it shows, until a signal stops them
cleanly (exit 0, no traceback, the runtime's log lines on stderr); the standalone delay
producer's sends against the test broker; TOML blocks are configs the loader accepts (a
fragment with a broker added; references given values); JSON blocks parse (a fragment of
members as an object's content)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.host.config import parse_config
from runtime.kafka import create_topics
from tests.certs import self_signed

pytestmark = pytest.mark.integration  # some examples start runtimes and brokers
ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")
PEM = re.compile(r'"/[^"]+\.pem"')
READY_LINE = "Ctrl-C to stop"
START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 30


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    language: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.page.name}:{self.line}"

    @property
    def program(self) -> str | None:
        """The file name its first line gives (`# embed.py: ...`), if any."""
        first = self.text.splitlines()[0] if self.text else ""
        found = re.match(r"# ([\w.]+\.(?:py|toml))\b", first)
        return found.group(1) if found else None


def examples(language: str) -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            if match.group(1) == language:
                line = text[:match.start()].count("\n") + 1
                found.append(Example(page, line, language, match.group(2)))
    return found


def ids(found: list[Example]) -> list[str]:
    return [e.name for e in found]


PYTHON, TOML, JSON = examples("python"), examples("toml"), examples("json")


@pytest.mark.parametrize("example", PYTHON, ids=ids(PYTHON))
def test_a_python_example_is_a_complete_program(example: Example) -> None:
    compile(example.text, example.name, "exec")  # a top-level await is a SyntaxError
    assert "asyncio.run(" in example.text or "await" not in example.text, \
        f"{example.name}: async code that nothing runs"
    assert example.program is not None, f"{example.name}: say its file name on line 1"


@pytest.mark.parametrize("example", TOML, ids=ids(TOML))
def test_a_toml_example_is_a_config_the_loader_accepts(example: Example,
                                                        tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        ) -> None:
    secret = tmp_path / "secret"  # 32 bytes in base64: a sealing key, or a password
    secret.write_text(base64.b64encode(bytes(range(32))).decode())
    cert, _ = self_signed(tmp_path)  # for a PEM file the example names

    def given(match: re.Match[str]) -> str:
        kind, name = match.groups()
        if kind == "env":
            monkeypatch.setenv(name, "a-value")
            return match.group(0)
        return f"${{file:{secret}}}"

    text = PEM.sub(f'"{cert}"', REFERENCE.sub(given, example.text))
    raw = tomllib.loads(text)
    raw.setdefault("brokers", [{"name": "Kafka", "bootstrap_servers": "embedded"}])
    parse_config(raw)


@pytest.mark.parametrize("example", JSON, ids=ids(JSON))
def test_a_json_example_parses(example: Example) -> None:
    text = example.text.strip()
    json.loads("{" + text + "}" if text.startswith('"') else text)


SHELL = examples("sh")
RUN_ELSEWHERE = {
    "README.md": "tests/integration/test_readme_try_it.py runs each block with bash",
    "admin-api.md": "tests/integration/test_console.py runs each command against a runtime",
}


@pytest.mark.parametrize("example", SHELL, ids=ids(SHELL))
def test_a_shell_example_is_run_or_its_commands_parse(example: Example) -> None:
    """A README or console block is run elsewhere (`RUN_ELSEWHERE`); a `hookstream
    report` line (a Spark job each: tests/spark runs the report itself) parses with the
    command's own parser and passes its checks, and names only options it has."""
    from runtime.report import _check, _parser

    if example.page.name in RUN_ELSEWHERE:
        return
    commands = [line.split("#", 1)[0].split() for line in example.text.splitlines()]
    for words in filter(None, commands):
        assert words[:2] == [".venv/bin/hookstream", "report"], f"{example.name}: {words}"
        _check(_parser().parse_args([w.strip("'") for w in words[2:]]))


def library_programs() -> list[Example]:
    return [e for e in PYTHON if e.page.name == "library-api.md"]


def config_of(page: str) -> str:
    return next(e.text for e in TOML if e.page.name == page and e.program == "config.toml")


async def run_until_ready(program: Path, cwd: Path,
                          env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(program), cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)


@pytest.mark.parametrize("example", library_programs(), ids=ids(library_programs()))
async def test_a_library_example_runs_as_written_and_stops_cleanly_on_a_signal(
        example: Example, tmp_path: Path) -> None:
    assert example.program is not None
    (tmp_path / "config.toml").write_text(config_of("library-api.md"))
    program = tmp_path / example.program
    program.write_text(example.text)
    process = await run_until_ready(program, tmp_path, {**os.environ,
                                                        "PYTHONPATH": str(ROOT)})
    assert process.stdout is not None and process.stderr is not None
    printed: list[str] = []
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while READY_LINE not in (printed[-1] if printed else ""):
                line = await process.stdout.readline()
                assert line, f"it ended before saying {READY_LINE!r}: {printed}"
                printed.append(line.decode())
        process.send_signal(signal.SIGINT)  # Ctrl-C
        async with asyncio.timeout(STOP_TIMEOUT_S):
            _, errors = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    logged = errors.decode()
    assert process.returncode == 0, logged[-2000:]
    assert "Traceback" not in logged and "KeyboardInterrupt" not in logged
    assert " INFO runtime: stopped cleanly" in logged  # logging is on


async def test_the_standalone_delay_producer_example_sends(kafka_bootstrap: str,
                                                           tmp_path: Path) -> None:
    example = next(e for e in PYTHON if e.program == "delay_send.py")
    await create_topics(kafka_bootstrap, {"delay.1s": 1, "delay.1m.a": 1, "delay.1m.b": 1})
    program = tmp_path / "delay_send.py"
    program.write_text(example.text)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(program), cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "KAFKA_BOOTSTRAP": kafka_bootstrap},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(START_TIMEOUT_S):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()[-2000:]
    assert out.decode() == "sent 101 delayed records\n"
