"""The process sampler as an actor (runtime/host/process.py): a sample per timer message,
and how late each message came is the event loop's lag, on a FakeClock."""

from __future__ import annotations

from runtime.host.metrics import HistogramValue, Registry, Value
from runtime.host.process import ProcessSampler, SamplerActor
from runtime.kernel.clock import FakeClock
from runtime.kernel.supervisor import ChildSpec
from runtime.kernel.system import ActorSystem


async def test_the_sampler_samples_every_interval_and_measures_how_late_it_ran() -> None:
    clock, registry = FakeClock(), Registry()
    sampler = ProcessSampler(registry, clock, interval_ms=1000)
    system = ActorSystem(clock=clock)
    await system.start()
    await system.spawn(ChildSpec("sampler", lambda: SamplerActor("sampler", sampler)))
    try:
        [lag] = registry.series("hookstream_event_loop_lag_ms")
        [rss] = registry.series("process_resident_memory_bytes")
        assert isinstance(lag, HistogramValue) and isinstance(rss, Value)
        assert rss.value > 0 and lag.count == 0  # sampled once at start
        await clock.advance_settled(999)
        assert lag.count == 0
        await clock.advance_settled(1)
        assert (lag.count, lag.sum) == (1, 0)
        await clock.advance_settled(1250)  # the loop was 250 ms late for the next one
        assert (lag.count, lag.sum) == (2, 250)
    finally:
        await system.stop()
