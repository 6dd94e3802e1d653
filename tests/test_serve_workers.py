"""`python -m app.serve --http-workers N`: N server processes on one port over one engine process.

The engine process takes one pipe (link) per server process; each link's requests and answers
stay on it, and one that closes leaves the others serving. Started as a user starts it, the
server answers the official client from every worker as the in-process engine does, /metrics
sums the workers' request series, and SIGTERM stops every process it started.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import moondream as md
import pytest

from app.common import open_engine
from app.serve import AUTO_HTTP_WORKERS, http_workers, parse_args
from app.serve_process import EngineProcess
from app.tools.screenshot import free_port
from tests.conftest import torch_threads
from tests.test_serve import KEY, jpeg_bytes, post, scene  # noqa: F401 - a fixture


def test_two_links_share_one_engine_process_and_close_apart(scene):
    image, _ = scene
    jpeg = jpeg_bytes(image)
    owner = EngineProcess.open(weights=None, max_batch=4, torch_threads=1, links=2)
    try:
        other = EngineProcess.attach(owner.spare_links[0])
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda k: (owner if k % 2 else other).point(jpeg, "circle"), range(8)))
        assert got == [got[0]] * 8 and got[0]["points"]
        rid_clash = other.submit(jpeg, "detect", "circle"), owner.submit(jpeg, "detect", "circle")
        assert rid_clash[0].id == rid_clash[1].id   # each link numbers its own requests
        assert rid_clash[0].result(timeout=120) == rid_clash[1].result(timeout=120)
        other.close()                               # its link ends; the engine keeps serving the owner's
        assert owner.point(jpeg, "circle") == got[0]
        assert owner.process.is_alive()
    finally:
        owner.close()
    assert not owner.process.is_alive()


def test_a_link_that_ends_cancels_what_its_server_left(scene):
    """A worker that dies leaves requests in the engine that nobody will read: the child cancels
    them (queued ones and those still being decoded), as a client's disconnect does."""
    import hashlib
    import multiprocessing
    import threading
    from concurrent.futures import Future

    from app.serve_process import EngineChild

    class Handle:
        def __init__(self) -> None:
            self.future, self.cancelled = Future(), False

        def cancel(self) -> None:
            self.cancelled = True

    class StandInEngine:
        step = None

        def __init__(self) -> None:
            self.handles: list[Handle] = []

        def submit(self, image, skill, obj, **options) -> Handle:
            self.handles.append(Handle())
            return self.handles[-1]

    image, _ = scene
    jpeg = jpeg_bytes(image)
    digest = hashlib.sha256(jpeg).digest()
    engine = StandInEngine()
    (owner, owner_end), (ours, theirs) = multiprocessing.Pipe(), multiprocessing.Pipe()
    child = EngineChild([owner_end, theirs], engine, 64 << 20)
    link = child.links[1]
    link.sender.start()
    reader = threading.Thread(target=child.serve_spare, args=(link,))   # reads to the end, cancels, closes
    reader.start()
    ours.send(("submit", 1, digest, jpeg, "point", "star", {}, False, True))   # with its bytes: decoded on the pool
    assert ours.recv() == ("accepted", 1)
    for rid in (2, 3):                                                           # its digest alone, read at once
        ours.send(("submit", rid, digest, None, "detect", "star", {}, False, False))
    ours.send(("submit", 4, digest, jpeg, "point", "circle", {}, False, False))  # on the pool as the link ends
    ours.close()                     # the worker is gone
    reader.join(timeout=120)
    assert not reader.is_alive()
    child.pool.shutdown(wait=True)   # a submit still on the pool is cancelled as it lands
    assert len(engine.handles) == 4 and all(h.cancelled for h in engine.handles)
    owner.close()


def hold_link(conn, seconds: float) -> None:
    time.sleep(seconds)


def test_a_worker_that_dies_ends_its_link_in_the_engine_process():
    """The supervisor keeps no copy of a worker's end of the pipe, so the engine's end reads EOF
    when the worker dies (and `EngineChild.serve_spare` cancels what it left)."""
    import multiprocessing

    from app.serve_workers import start_workers

    engine_end, worker_end = multiprocessing.Pipe()
    (proc,) = start_workers([worker_end], hold_link, (600.0,))
    assert worker_end.closed
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert engine_end.poll(60)        # readable: the end of the stream, not a message
    with pytest.raises(EOFError):
        engine_end.recv()


def test_http_workers_need_the_engine_process(capsys):
    assert parse_args([]).http_workers == "auto" and parse_args(["--http-workers", "3"]).http_workers == 3
    for bad in (["--http-workers", "0"], ["--http-workers", "2", "--engine-thread"], ["--http-workers", "2", "--ray"],
                ["--http-workers", "many"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
    err = capsys.readouterr().err
    assert "--http-workers must be between 1 and 64" in err and "needs the engine in its own process" in err
    assert "must be a whole number or auto, got 'many'" in err


def test_auto_http_workers_only_where_the_engine_runs_on_cuda_in_its_own_process_on_a_big_host():
    auto = parse_args([])
    assert http_workers(auto, cores=16, cuda=True) == AUTO_HTTP_WORKERS == 4
    assert http_workers(auto, cores=2, cuda=True) == 1             # a small host keeps one process
    assert http_workers(auto, cores=16, cuda=False) == 1           # the CPU engine is the bottleneck there
    assert http_workers(parse_args(["--engine-thread"]), cores=16, cuda=True) == 1
    assert http_workers(parse_args(["--ray"]), cores=16, cuda=True) == 1
    assert http_workers(parse_args(["--http-workers", "1"]), cores=16, cuda=True) == 1   # as told
    assert http_workers(parse_args(["--http-workers", "3"]), cores=2, cuda=False) == 3


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (from /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def requests_counted(root: str) -> float:
    with urllib.request.urlopen(root + "/metrics", timeout=60) as r:   # a new connection: any worker
        text = r.read().decode()
    m = re.search(r'^mdpipe_requests_total\{endpoint="point",status="200"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_http_workers_answer_on_one_port_and_stop_together(scene, tmp_path):
    image, _ = scene
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "app.serve", "--port", str(port), "--http-workers", "2",
                             "--api-key", KEY, "--max-batch", "4"], cwd=Path(__file__).resolve().parent.parent,
                            stderr=log, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 300
        while True:   # the workers import, bind and answer /health once the engine has loaded
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not answer /health"
            try:
                urllib.request.urlopen(root + "/health", timeout=10).close()
                break
            except OSError:
                time.sleep(0.2)
        kids = children(proc.pid)
        assert len(kids) >= 3, kids   # the engine process and two workers (and multiprocessing's tracker)
        objects = ["star", "red circle", "blue", "star"] * 4
        with ThreadPoolExecutor(8) as pool:   # the client opens a connection per call: both workers answer
            got = list(pool.map(lambda obj: md.vl(endpoint=root + "/v1", api_key=KEY).point(image, obj), objects))
        with torch_threads(1):
            engine = open_engine(None, max_batch=4)
            want = {obj: engine.point(jpeg_bytes(image), obj) for obj in set(objects)}
        assert got == [want[obj] for obj in objects]
        code, body = post(root + "/v1/point", {"object": "star"}, {"X-Moondream-Auth": KEY})
        assert code == 400 and "image_url is missing" in body["error"]
        # Every scrape, whichever worker answers it, counts the requests of both.
        assert [requests_counted(root) for _ in range(8)] == [len(objects)] * 8
        # A worker that dies: the other serves on, the supervisor says so, the counts stay.
        engine_pid = int(re.search(r"engine process (\d+)", (tmp_path / "serve.log").read_text()).group(1))
        workers = [k for k in kids if k != engine_pid and b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()
                   and b"pipe_handle" in Path(f"/proc/{k}/cmdline").read_bytes()]
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)
        while "warning: HTTP worker" not in (tmp_path / "serve.log").read_text():
            assert time.monotonic() < deadline + 120, "the supervisor did not report the dead worker"
            time.sleep(0.1)
        assert md.vl(endpoint=root + "/v1", api_key=KEY).point(image, "star") == want["star"]
        assert requests_counted(root) == len(objects) + 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
        deadline = time.monotonic() + 60
        while any(alive(k) for k in kids):
            assert time.monotonic() < deadline, [k for k in kids if alive(k)]
            time.sleep(0.1)
        assert "Traceback" not in (tmp_path / "serve.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
