"""Chaos for minutes: the seeded chaos run of tests/chaos (tests/chaos/harness.py) for long.

    .venv/bin/python bench/chaos.py --minutes 30 [--seed N] [--records-per-s 20]
                                    [--bootstrap host:port] [--no-audit]

A runtime with ten subscriptions (failing, dead-lettering, slow and filtered endpoints)
under load while a seeded schedule kills random actors anywhere in its tree, pauses,
resumes and updates subscriptions, cuts every broker connection for a while and
unsubscribes subscriptions (subscribing them again later), for `--minutes`; then the
counting receivers, the dead letter topics and the commits must agree: 0 lost, 0
unexpected, duplicates only after a fault that found them uncommitted, every group
committed to the end. Prints the seed first (`--seed` replays a run's schedule), the
faults and the verdict as Markdown for bench/RESULTS.md; exits 1 on a bad verdict.
Then (unless `--no-audit`) the journal's Spark audit of the run (`python -m runtime report`
in a process of its own, `local[*]`) must agree with the receivers: 0 lost, and as many
records delivered as the receivers answered 2xx (its duplicates are printed beside the
receivers': a delivery whose actor was killed before it journaled is one the journal
cannot see twice).

Starts an embedded broker of its own behind a loopback proxy that the cuts close
(tests/integration/cut_proxy.py); with `--bootstrap` (a running broker, which advertises
its own address) there is no proxy, so no cuts and no unsubscribes. Bounded: production
stops after `--minutes`, the drain has a timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.kafka import compat
from runtime.kafka.broker import EmbeddedBroker
from tests.chaos.harness import ChaosRun, Shape, Verdict
from tests.chaos.schedule import seed_from_env
from tests.integration.cut_proxy import CutProxy

ROOT = Path(__file__).resolve().parents[1]
AUDIT_TIMEOUT_S = 1800


async def run(args: argparse.Namespace, seed: int, tmp: Path) -> Verdict:
    shape = Shape(seconds=args.minutes * 60, records_per_s=args.records_per_s,
                  drain_s=max(120.0, args.minutes * 10))
    if args.bootstrap:
        return await ChaosRun(args.bootstrap, tmp, seed, shape).run()
    proxy = CutProxy(0)  # the broker advertises the proxy: every connection can be cut
    async with EmbeddedBroker(advertised=proxy.address) as broker:
        proxy.target_port = int(broker.bootstrap.rsplit(":", 1)[1])
        compat.note_embedded(proxy.address)
        async with proxy:
            return await ChaosRun(proxy.address, tmp, seed, shape, proxy=proxy).run()


def audit(tmp: Path, verdict: Verdict) -> tuple[bool, str]:
    """The Spark report over the run's journal: whether it agrees with the receivers, and
    what it says."""
    out = tmp / "report"
    done = subprocess.run([sys.executable, "-m", "runtime", "report", str(tmp / "journal"),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=AUDIT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        return False, f"Audit: the report failed ({done.returncode}):\n{done.stderr[-3000:]}"
    summary = json.loads((out / "summary.json").read_text())
    agrees = summary["lost"] == 0 and summary["delivered"] == verdict.delivered
    said = (f"Audit (Spark, the journal): delivered {summary['delivered']} (receivers "
            f"{verdict.delivered}), lost {summary['lost']}, unknown {summary.get('unknown')}, "
            f"duplicates {summary['duplicates']} (receivers {verdict.explained_duplicates}), "
            f"dead-lettered {summary['dead_lettered']} (topics {verdict.dead_lettered}): "
            f"{'agrees' if agrees else 'DOES NOT AGREE'}")
    return bool(agrees), said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=None,
                        help="replay this seed's schedule (default: HOOKSTREAM_CHAOS_SEED "
                             "or a fresh one)")
    parser.add_argument("--records-per-s", type=int, default=20, help="per topic")
    parser.add_argument("--bootstrap", default="", help="a running broker (default: an "
                        "embedded one started here)")
    parser.add_argument("--no-audit", action="store_true",
                        help="skip the Spark audit of the run's journal")
    parser.add_argument("--log", default="", help="write the runtime's log (INFO and up, "
                        "timestamped) to this file instead of its errors to stderr")
    args = parser.parse_args()
    if args.log:  # what a failing run did, and when: the faults print their times too
        logging.basicConfig(filename=args.log, level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    else:  # a dead letter or a killed actor is logged each time: thousands of lines
        logging.disable(logging.WARNING)
    seed = args.seed if args.seed is not None else seed_from_env()
    print(f"chaos seed {seed}, {args.minutes:g} min, load average {os.getloadavg()}",
          flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="chaos-") as name:
        tmp = Path(name)
        verdict = asyncio.run(run(args, seed, tmp))
        audited, said = (True, "Audit: skipped (--no-audit)") if args.no_audit else \
            audit(tmp, verdict)
    took = time.monotonic() - started
    print(f"\n## Chaos, {args.minutes:g} min, seed {seed}\n")
    print(f"Command: `.venv/bin/python bench/chaos.py --minutes {args.minutes:g} "
          f"--seed {seed}`; {took / 60:.1f} min in all, load average after "
          f"{os.getloadavg()}.\n")
    print("```\n" + verdict.summary(faults_shown=40) + "\n```")
    print(f"\n{said}")
    print(f"\nVerdict: {'clean' if verdict.clean and audited else 'NOT CLEAN'}")
    return 0 if verdict.clean and audited else 1


if __name__ == "__main__":
    sys.exit(main())
