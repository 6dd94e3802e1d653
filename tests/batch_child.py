"""`python -m tests.batch_child N ARGS...`: `python -m app.batch ARGS...` that stops itself
(SIGSTOP) right after its N-th new record is on disk, having printed "paused N" on stdout.

Kill-and-resume tests read that line (a blocking read, no polling, no clock), then SIGKILL or
SIGINT + SIGCONT the child: the kill point is exactly N durable records, however loaded the
machine is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import app.job as job


def main() -> int:
    pause_after, argv = int(sys.argv[1]), sys.argv[2:]
    real_commit = job.commit
    done = 0

    def commit(*args, **kwargs):
        nonlocal done
        failed = real_commit(*args, **kwargs)
        done += 1
        if done == pause_after:
            print(f"paused {done}", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        return failed

    job.commit = commit  # before app.batch / app.batch_ray import it
    from app.batch import main as batch_main
    return batch_main(argv)


def start(pause_after: int, argv: list[str], **popen) -> subprocess.Popen:
    """Start the child and return once it has paused after `pause_after` new records."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.batch_child", str(pause_after), *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    line = proc.stdout.readline()
    if line.strip() != f"paused {pause_after}":
        proc.kill()
        _, err = proc.communicate(timeout=60)
        raise AssertionError(f"the run ended before its {pause_after}th record: {line!r} {err[-2000:]}")
    # The line comes just before the child stops itself: wait (blocking, no clock) until it has,
    # so that a signal sent next finds it stopped.
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        raise AssertionError(f"the run ended instead of pausing (wait status {status})")
    return proc


if __name__ == "__main__":
    sys.exit(main())
