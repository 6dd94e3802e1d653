"""`python -m app.serve --http-workers N`: N server processes on one port, over one engine process.

One event loop parses every request's JSON body, hashes its image and answers it; at c=32 those
steps queue behind each other. Here N spawned processes each run the whole app (`build_app`) on
a socket of their own bound to the same port with SO_REUSEPORT (the kernel spreads new
connections over them), each over its own pipe to the one engine process
(`EngineProcess.attach` of one of `EngineProcess.open(links=N + 1)`'s spare links). The first
process, which started the engine, only supervises: it stops the workers on Ctrl-C or SIGTERM and
reports one that exits. Request series in /metrics are summed over the workers through
prometheus_client's multiprocess files (`app.serve_metrics`).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from multiprocessing.connection import wait

from prometheus_client.multiprocess import mark_process_dead

from app.common import one_line
from app.serve_metrics import MULTIPROCESS_DIR


def shared_port_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port with SO_REUSEPORT, so several processes each hold one."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def http_worker(conn, host: str, port: int, api_key: str | None, limits) -> None:
    """One worker (spawned): the app over its own link to the engine process, on its own socket."""
    import uvicorn

    from app.serve import build_app
    from app.serve_process import EngineProcess

    engine = EngineProcess.attach(conn)
    server = uvicorn.Server(uvicorn.Config(build_app(engine, api_key=api_key, limits=limits), log_level="warning"))
    threading.Thread(target=stop_with_parent, args=(server,), name="parent-watch", daemon=True).start()
    try:
        server.run(sockets=[shared_port_socket(host, port)])
    except OSError as e:
        print(f"error: an HTTP worker cannot serve on {host}:{port}: {one_line(e)}", file=sys.stderr)
    except KeyboardInterrupt:   # Ctrl-C reaches every process of the terminal's group
        pass
    finally:
        engine.close()


def stop_with_parent(server) -> None:
    """A worker whose supervisor died (e.g. SIGKILL) stops too, and frees the port."""
    wait([multiprocessing.parent_process().sentinel])
    server.should_exit = True


def serve_workers(engine, host: str, port: int, api_key: str | None, limits) -> int:
    """Start an HTTP process over each of `engine.spare_links` (an `EngineProcess` opened with `links=N + 1`)
    and supervise them until Ctrl-C or SIGTERM (exit status 0) or until the last one exits (1). From then
    on this process ignores SIGINT and SIGTERM (the caller closes the engine, which is bounded too)."""
    try:   # the port is free (or shared with SO_REUSEPORT): fail here, in the first process, if not
        shared_port_socket(host, port).close()
    except OSError as e:
        print(f"error: cannot serve on {host}:{port}: {one_line(e)}", file=sys.stderr)
        return 2
    metrics_dir = tempfile.mkdtemp(prefix="mdpipe-metrics-")
    os.environ[MULTIPROCESS_DIR] = metrics_dir   # inherited by the spawned workers, read at their first import
    # Set here, not inherited: a shell script's background job starts with SIGINT ignored (uvicorn,
    # which the workers run, sets its own handlers the same way).
    signal.signal(signal.SIGINT, stop_on_signal)
    signal.signal(signal.SIGTERM, stop_on_signal)
    procs: list = []
    try:
        procs = start_workers(engine.spare_links, http_worker, (host, port, api_key, limits))
        print(f"{len(procs)} HTTP worker processes on {host}:{port}", file=sys.stderr, flush=True)
        running = list(procs)
        while running:
            for sentinel in wait([p.sentinel for p in running]):
                proc = next(p for p in running if p.sentinel == sentinel)
                proc.join()
                running.remove(proc)
                mark_process_dead(proc.pid, metrics_dir)   # its live gauges leave the sums; its counts stay
                print(f"warning: HTTP worker {proc.name} stopped (exit code {proc.exitcode}); {len(running)} "
                      "still serve", file=sys.stderr, flush=True)
        print("error: every HTTP worker stopped; see the lines above", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        # The orderly stop is bounded (`stop`'s timeout, then the engine's): a second Ctrl-C or
        # SIGTERM does not cut it short, which would leave workers and their files behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop(procs)
        os.environ.pop(MULTIPROCESS_DIR, None)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def start_workers(links: list, target, args: tuple) -> list:
    """A spawned process per link, running target(link, *args). Once a process holds its link, this
    process closes its own copy: then a worker that dies ends its link in the engine process, which
    cancels what that worker left (a copy kept here would hold the link open)."""
    ctx = multiprocessing.get_context("spawn")
    procs = []
    for i, conn in enumerate(links):
        proc = ctx.Process(target=target, args=(conn, *args), name=f"mdpipe-http-{i + 1}", daemon=True)
        proc.start()
        conn.close()
        procs.append(proc)
    return procs


def stop_on_signal(signum, frame) -> None:
    raise KeyboardInterrupt


def stop(procs: list, timeout: float = 30.0) -> None:
    """SIGTERM (uvicorn's graceful stop) to each worker still running; kill what does not stop."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        if proc.pid is None:   # never started
            continue
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
