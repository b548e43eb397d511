"""A real Spark standalone cluster on loopback, from the installed pyspark: one master and
`workers` workers (`spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`),
each a JVM this module starts and stops by its PID. Each worker starts one executor JVM
per application, and a driver (`python -m runtime report --master spark://...`) is one
more: a master and one worker make four JVMs with the driver's.

Stopping: SIGTERM to the workers (a worker kills its executors on the way out), then the
master; whatever has not exited after `STOP_TIMEOUT_S`, executors included (found as the
workers' children before the stop), gets SIGKILL. Logs, work and scratch directories are
under the directory given to `start`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runtime.kafka.broker import free_port

STOP_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 120.0


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def loopback_env(base: Path, java_options: str = "",
                 driver_conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for every process of the cluster and its drivers: loopback only,
    `java_options` for the master, the workers, drivers and executors, and `driver_conf`
    as `--conf key=value` of every driver (pyspark's submit arguments)."""
    local = base / "local"
    local.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOCAL_DIRS": str(local), "SPARK_LOG_DIR": str(base / "logs"),
           "SPARK_NO_DAEMONIZE": "1",
           "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    conf = dict(driver_conf or {})
    if java_options:
        env["SPARK_DAEMON_JAVA_OPTS"] = java_options
        conf |= {"spark.driver.extraJavaOptions": java_options,
                 "spark.executor.extraJavaOptions": java_options}
    if conf:  # pyspark splits it as a shell would
        env["PYSPARK_SUBMIT_ARGS"] = " ".join(
            [*(f"--conf {shlex.quote(f'{key}={value}')}" for key, value in conf.items()),
             "pyspark-shell"])
    return env


@dataclass
class StandaloneCluster:
    base: Path
    master_url: str
    web_url: str
    workers: int
    java_options: str = ""
    driver_conf: Mapping[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The environment for a driver of this cluster."""
        return loopback_env(self.base, self.java_options, self.driver_conf)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until the master lists every worker as ALIVE; AssertionError with the logs if
        a process died or time ran out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise AssertionError(f"cluster process {process.args} exited:\n"
                                         f"{self.logs()}")
            if self.alive_workers() == self.workers:
                return
            time.sleep(0.5)
        raise AssertionError(f"{self.workers} workers not ALIVE after {timeout_s} s:\n"
                             f"{self.logs()}")

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=2) as reply:
                state = json.load(reply)
        except OSError:
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def logs(self, tail: int = 40) -> str:
        parts = []
        for path in sorted((self.base / "out").glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        children = [pid for p in self.processes[1:] for pid in _descendants(p.pid)]
        for process in [*self.processes[1:], self.processes[0]]:  # workers, then master
            _terminate(process)
        for pid in children:  # executors a worker failed to take down
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(_running(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)


def _running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (orphans are reaped by init)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found += [int(child), *_descendants(int(child))]
    return found


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


def start(base: Path, workers: int = 1, cores: int = 1, memory: str = "1g",
          java_options: str = "", driver_conf: Mapping[str, str] | None = None,
          ) -> StandaloneCluster:
    """Start the master and the workers (without waiting: see `wait_ready`); `driver_conf`
    goes to the drivers that `env()` serves."""
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = loopback_env(base, java_options)
    out = base / "out"
    out.mkdir(parents=True, exist_ok=True)
    port, web_port = free_port(), free_port()
    cluster = StandaloneCluster(base, f"spark://127.0.0.1:{port}",
                                f"http://127.0.0.1:{web_port}", workers, java_options,
                                dict(driver_conf or {}))

    def spawn(name: str, *args: str) -> None:
        log = (out / f"{name}.log").open("wb")
        cluster.processes.append(subprocess.Popen(
            [spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=base, start_new_session=True))
        log.close()

    try:
        spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(web_port))
        for i in range(workers):
            work = base / f"work-{i}"
            work.mkdir(exist_ok=True)
            spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host",
                  "127.0.0.1", "--port", "0", "--webui-port", str(free_port()), "--cores",
                  str(cores), "--memory", memory, "--work-dir", str(work), cluster.master_url)
    except BaseException:
        cluster.stop()
        raise
    return cluster
