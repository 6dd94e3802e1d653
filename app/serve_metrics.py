"""The server's Prometheus series (`GET /metrics`).

Request series (counts, latency, phases) are kept by each server process. The engine's state
(queue, rows, steps, the engine thread's clock) is read from the engine when /metrics is served
(`EngineGauges`, a collector), so every server process over one engine reports the same values.

With `--http-workers N` several server processes answer on one port and a scrape reaches any of
them; then the request series and the servers' CPU live in prometheus_client's multiprocess files
(`PROMETHEUS_MULTIPROC_DIR`, set by `app.serve_workers` before it starts the workers) and every
scrape sums them over the workers.
"""

from __future__ import annotations

import os
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"   # prometheus_client's switch, read when it is first imported


def multiprocess() -> bool:
    """Whether this process keeps its series in prometheus_client's multiprocess files."""
    return MULTIPROCESS_DIR in os.environ


class EngineGauges:
    """The engine's state as gauges, read at each scrape (with `--engine-process`: the child's last
    report, at most `STATS_PERIOD` old)."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def collect(self):
        engine = self.engine
        yield GaugeMetricFamily("mdpipe_queue_depth", "requests submitted but not yet admitted", value=engine.queued())
        yield GaugeMetricFamily("mdpipe_running", "requests holding a KV row", value=engine.pools()["running"])
        yield GaugeMetricFamily("mdpipe_decode_steps", "decode steps since start (rate() gives steps/s)",
                                value=engine.decode_steps)
        yield GaugeMetricFamily("mdpipe_prefill_steps", "steps that prefilled admitted requests since start (mixed "
                                "steps included)", value=engine.prefill_steps)
        clock = getattr(engine, "step_clock", None)
        if clock is None:
            return
        yield GaugeMetricFamily("mdpipe_engine_ticks", "engine loop ticks since start", value=engine.steps)
        yield GaugeMetricFamily("mdpipe_cuda_graphs", "CUDA graphs the engine holds (one that grows under load: "
                                "captures in the serving loop)", value=engine.graphs_held)
        yield GaugeMetricFamily("mdpipe_engine_decode_rows", "rows computed by decode forwards since start (batch "
                                "buckets, summed)", value=engine.decode_rows)
        verbs = GaugeMetricFamily("mdpipe_engine_verb_seconds", "the engine thread's seconds per verb since start, "
                                  "wall and its own CPU (wall beyond CPU: waiting for the device or the interpreter "
                                  "lock)", labels=["verb", "clock"])
        for verb, (wall, cpu) in clock.snapshot().items():
            verbs.add_metric([verb, "wall"], wall)
            verbs.add_metric([verb, "cpu"], cpu)
        yield verbs


class Metrics:
    """Prometheus series of one server (own registry: several servers may share a process)."""

    def __init__(self, engine) -> None:
        self.multiprocess = multiprocess()
        self.registry = CollectorRegistry()
        self.engine_gauges = EngineGauges(engine)
        self.requests = Counter("mdpipe_requests", "HTTP API requests by endpoint and status",
                                ["endpoint", "status"], registry=self.registry)
        self.latency = Histogram("mdpipe_request_seconds", "time from request to answer, by endpoint", ["endpoint"],
                                 buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
                                 registry=self.registry)
        self.phases = Counter("mdpipe_request_phase_seconds",
                              "seconds of detect/point requests by phase: body (receive and parse), submit (image, "
                              "grammar, queueing), wait (until the result reached the event loop; 'wake' is its part "
                              "after the engine finished, when known), reply (encoding)", ["phase"],
                              registry=self.registry)
        loop_help = "CPU seconds of the server's event-loop thread (HTTP, JSON, hashing, submits) since start"
        process_help = ("CPU seconds of the server's process since start, every thread (the engine thread's too "
                        "when the engine runs in it)")
        if self.multiprocess:   # summed over the live workers; each sets its own after every request
            self.loop_cpu = Gauge("mdpipe_server_loop_cpu_seconds", loop_help + ", summed over the HTTP workers",
                                  registry=self.registry, multiprocess_mode="livesum")
            self.process_cpu = Gauge("mdpipe_server_process_cpu_seconds", process_help + ", summed over the HTTP "
                                     "workers", registry=self.registry, multiprocess_mode="livesum")
        else:   # read when /metrics is served, which is on the event loop's thread: that thread's CPU
            self.registry.register(self.engine_gauges)
            Gauge("mdpipe_server_loop_cpu_seconds", loop_help, registry=self.registry).set_function(time.thread_time)
            Gauge("mdpipe_server_process_cpu_seconds", process_help,
                  registry=self.registry).set_function(time.process_time)

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        """One answered request (on the event loop's thread)."""
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)
        if self.multiprocess:
            self.loop_cpu.set(time.thread_time())
            self.process_cpu.set(time.process_time())

    def observe_phases(self, marks: list[float], finished: float | None) -> None:
        """marks: monotonic times at start, body read, submitted, result in hand, reply encoded;
        `finished`: when the engine delivered the result (its clock), if known."""
        for name, a, b in zip(("body", "submit", "wait", "reply"), marks, marks[1:]):
            self.phases.labels(name).inc(b - a)
        if finished is not None and marks[2] <= finished <= marks[3]:
            self.phases.labels("wake").inc(marks[3] - finished)

    def text(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        registry.register(self.engine_gauges)
        return generate_latest(registry)
