"""Bulk-annotation throughput, end to end: `python -m app.batch` single-process vs `--ray`.

    python -m app.bench_batch (--weights DIR | --preset moondream2|tiny|embedded) [--images 300]
        [--size 378 | --size LO-HI] [--format jpg|png] [--device cuda] [--dtype bf16]
        [--modes single,ray] [--replicas 1] [--max-objects 10] [--max-batch N] [--window N]
        [--object TEXT] [--baseline N0] [--workdir DIR] [--out-json FILE] [--timeout S]

Generates `--images` distinct synthetic scenes (engine/scenes.py; `--size 378`: every image
378x378, `--size 96-512`: random sizes) in WORKDIR/images, then runs each mode once, as a child
process, from the repository root (nothing is shared between modes but the page cache):

    single: python -m app.batch WORKDIR/images --task detect --object OBJ --out WORKDIR/out-single
            --weights DIR --device D --dtype T --max-objects M --quiet [--max-batch N] [--window N]
    ray:    the same with --out WORKDIR/out-ray --ray --replicas R [--address ADDR]

Without `--weights`, a random checkpoint of `--preset` is written once to WORKDIR/ckpt-PRESET-sSEED
(`python -m engine random-checkpoint`) and reused by later runs with the same WORKDIR.
Every run starts from an empty OUT (app.batch would otherwise resume and skip everything).

Columns (one row per mode):
  wall s        wall clock of the whole child command: interpreter start, imports (torch), reading
                the checkpoint onto the device, inference, writing results.jsonl / coco.json, exit.
                --ray adds starting and stopping a local Ray cluster (or joining --address), its
                decode workers and the replica actor(s). This is what a user waits for.
  app img/s     app.batch's own closing line `speed: X images/s (N images in T s)`. Its clock
                (app/batch.py `run`/_run, app/batch_ray.py run_ray) does NOT cover the same work in
                both modes: single-process starts it after the engine is loaded and started
                (model load excluded); --ray starts it after ray.init and the resource check, so it
                includes the replica actor's model load, the decode workers' start-up and
                ray.shutdown(). Both stop after coco.json is written.
  wall img/s    images / wall s.
  marginal      with --baseline N0: each mode also runs on the first N0 images only (--limit N0, own
                OUT), and (images - N0) / (wall s - wall s of that run): the fixed start-up and
                shutdown costs cancel, leaving the steady-state rate (noisy when inference is short).
  steady        from one run: images/s between the moments the 10th and the 90th percentile image
                was recorded (results.jsonl is watched while the child runs): start-up, the
                ramp and the tail are left out.

`ray/single` is the ratio of the ray row to the single row for each rate. The results of the modes
are compared image by image (results.jsonl: every field but the timings "ms" and "queue_ms", any line order; floats within
--tol): a difference is reported loudly and makes the exit status 1, as does a failing child.
Note that the engine is not batch-invariant at the last bit (tests/test_batch_ray.py
assert_same), so on a GPU in bf16 the two modes, which batch differently, may legitimately differ.

The JSON (--out-json) holds the table, the GPU name (torch.cuda.get_device_name() with --device
cuda), versions and the exact commands that were run.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.model.device import resolve

ROOT = Path(__file__).resolve().parent.parent
MODES = ("single", "ray")
SPEED = re.compile(r"^speed: ([0-9.]+) images/s \((\d+) images in ([0-9.]+) s\)", re.MULTILINE)
MANIFEST = ".bench-manifest.json"  # app.batch ignores names starting with "."


@dataclass
class Run:
    """One child `python -m app.batch` command and what it reported."""
    mode: str
    images: int
    command: list[str]
    rc: int | None = None
    wall_s: float = 0.0
    app_images_per_s: float | None = None   # app.batch's `speed:` line
    app_images: int | None = None
    app_elapsed_s: float | None = None
    wall_images_per_s: float | None = None
    out: str = ""
    tail: str = ""                          # end of the child's output, kept when it failed
    baseline: Run | None = None             # the same mode on the first --baseline images
    marginal_images_per_s: float | None = None
    steady_images_per_s: float | None = None  # between the 10th and 90th percentile completions


# ---- inputs ------------------------------------------------------------------------------------

def parse_size(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    size = (int(lo), int(hi or lo))
    if not 16 <= size[0] <= size[1]:
        raise argparse.ArgumentTypeError(f"--size must be N or LO-HI with 16 <= LO <= HI, got {text!r}")
    return size


def make_images(folder: Path, n: int, size: tuple[int, int], fmt: str, seed: int) -> list[Path]:
    """n distinct scenes (engine.training.scenes.make_scene, item i from (seed, i)); reused when the folder
    already holds exactly this set."""
    import numpy as np

    from engine.training.scenes import make_scene

    want = {"n": n, "size": list(size), "format": fmt, "seed": seed}
    manifest = folder / MANIFEST
    names = [f"img{i:05d}.{fmt}" for i in range(n)]
    if manifest.is_file() and json.loads(manifest.read_text()) == want and \
            sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == names:
        return [folder / name for name in names]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for i, name in enumerate(names):
        scene = make_scene(np.random.default_rng([seed, i]), min_objects=1, max_objects=8, size_range=size)
        scene.image.save(folder / name, **({"quality": 90} if fmt == "jpg" else {}))
    manifest.write_text(json.dumps(want))
    return [folder / name for name in names]


def random_checkpoint(workdir: Path, preset: str, seed: int) -> Path:
    """WORKDIR/ckpt-PRESET-sSEED, written by the real CLI unless already there."""
    target = workdir / f"ckpt-{preset}-s{seed}"
    if not ((target / "config.json").is_file() and (target / "model.safetensors").is_file()):
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "engine", "random-checkpoint", str(target), "--preset", preset,
                        "--seed", str(seed)], check=True, cwd=ROOT)
    return target


# ---- running the modes -------------------------------------------------------------------------

def batch_command(args: argparse.Namespace, mode: str, images: Path, out: Path, weights: Path,
                  limit: int | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "app.batch", str(images), "--task", "detect", "--object", args.object,
           "--out", str(out), "--weights", str(weights), "--device", args.device, "--dtype", args.dtype,
           "--max-objects", str(args.max_objects), "--quiet"]
    for flag, value in (("--max-batch", args.max_batch), ("--window", args.window), ("--limit", limit)):
        if value is not None:
            cmd += [flag, str(value)]
    if mode == "ray":
        cmd += ["--ray", "--replicas", str(args.replicas)]
        if args.address is not None:
            cmd += ["--address", args.address]
    return cmd


def completion_times(out: Path, proc: subprocess.Popen, start: float, poll: float = 0.05) -> list[float]:
    """Seconds after `start` at which each line of OUT/results.jsonl appeared, watched while
    `proc` runs (app.batch appends one line per finished image)."""
    times: list[float] = []
    offset = 0
    path = out / "results.jsonl"
    while True:
        running = proc.poll() is None
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                new = f.read()
        except FileNotFoundError:
            new = b""
        offset += len(new)
        now = time.perf_counter() - start
        times.extend([now] * new.count(b"\n"))
        if not running:
            return times
        time.sleep(poll)


def steady_rate(times: list[float], images: int) -> float | None:
    """Images/s between the 10th and the 90th percentile completion: start-up and the tail cancel."""
    lo, hi = math.ceil(0.1 * images), math.floor(0.9 * images)
    if len(times) < hi or hi - lo < 2 or times[hi - 1] <= times[lo - 1]:
        return None
    return (hi - lo) / (times[hi - 1] - times[lo - 1])


def run_mode(cmd: list[str], mode: str, images: int, out: Path, timeout: float | None) -> Run:
    """Run one child from an empty OUT; time it and each image's completion; parse its `speed:` line."""
    shutil.rmtree(out, ignore_errors=True)
    run = Run(mode=mode, images=images, command=cmd, out=str(out))
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        timer = threading.Timer(timeout, proc.kill) if timeout else None
        if timer:
            timer.start()
        try:
            times = completion_times(out, proc, start)
        finally:
            if timer:
                timer.cancel()
        run.wall_s = time.perf_counter() - start
        log.seek(0)
        text = log.read()
    run.rc = proc.returncode
    if run.rc is not None and run.rc < 0 and timeout and run.wall_s >= timeout:
        run.rc = None
        text += f"\n[bench_batch: killed after {timeout} s]"
    run.wall_images_per_s = images / run.wall_s
    run.steady_images_per_s = steady_rate(times, images)
    found = SPEED.findall(text)
    if found:
        rate, n, elapsed = found[-1]
        run.app_images_per_s, run.app_images, run.app_elapsed_s = float(rate), int(n), float(elapsed)
    if run.rc != 0 or not found or run.app_images != images:
        run.tail = text[-4000:]
    return run


# ---- comparing results -------------------------------------------------------------------------

def load_results(out: Path) -> dict[str, dict]:
    """results.jsonl as {path: record without its timings} (the newest line of a path wins, as in app.batch)."""
    records: dict[str, dict] = {}
    for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            records[rec["path"]] = {k: v for k, v in rec.items() if k not in ("ms", "queue_ms")}
    return records


def same(a: object, b: object, tol: float) -> bool:
    """Equal structure and values; floats within tol (absolute; coordinates are normalised to 0..1)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=0.0,
                                                                                           abs_tol=tol)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k], tol) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y, tol) for x, y in zip(a, b))
    return a == b


def compare(want: dict[str, dict], got: dict[str, dict], tol: float) -> list[str]:
    """Paths whose records differ (or that only one side has), sorted."""
    return sorted(p for p in set(want) | set(got) if p not in want or p not in got or not same(want[p], got[p], tol))


# ---- report ------------------------------------------------------------------------------------

def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table(runs: list[Run]) -> str:
    lines = [f"{'mode':<7} {'images':>6} {'rc':>4} {'wall s':>8} {'app img/s':>10} {'wall img/s':>11} {'marginal':>9} "
             f"{'steady':>7}"]
    for r in runs:
        lines.append(f"{r.mode:<7} {r.images:>6} {str(r.rc):>4} {r.wall_s:>8.2f} {_num(r.app_images_per_s, '.1f'):>10} "
                     f"{_num(r.wall_images_per_s, '.2f'):>11} {_num(r.marginal_images_per_s, '.2f'):>9} "
                     f"{_num(r.steady_images_per_s, '.2f'):>7}")
    return "\n".join(lines)


def ratios(runs: list[Run]) -> dict[str, float | None]:
    by_mode = {r.mode: r for r in runs}
    if "single" not in by_mode or "ray" not in by_mode:
        return {}
    out: dict[str, float | None] = {}
    for key in ("app_images_per_s", "wall_images_per_s", "marginal_images_per_s", "steady_images_per_s"):
        a, b = getattr(by_mode["ray"], key), getattr(by_mode["single"], key)
        out[key] = a / b if a is not None and b else None
    return out


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine() or "cpu"


def version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _version

    try:
        return _version(dist)
    except PackageNotFoundError:
        return None


# ---- main --------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m app.bench_batch", description=__doc__.splitlines()[0])
    w = p.add_mutually_exclusive_group(required=True)
    w.add_argument("--weights", default=None, metavar="DIR", help="an existing checkpoint directory")
    w.add_argument("--preset", default=None, choices=("moondream2", "tiny", "embedded"),
                   help="write (once) a random checkpoint of this preset under WORKDIR")
    p.add_argument("--images", type=int, default=300, metavar="N")
    p.add_argument("--size", type=parse_size, default=(378, 378), metavar="N|LO-HI", help="image size (default 378)")
    p.add_argument("--format", default="jpg", choices=("jpg", "png"))
    p.add_argument("--seed", type=int, default=0, help="scenes and random checkpoint")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto", choices=("auto", "fp32", "bf16", "fp16"),
                   help="as app.batch takes it (auto: bf16 on a GPU or a CPU with native bf16, else fp32)")
    p.add_argument("--modes", default="single,ray", help="comma-separated, from: " + ", ".join(MODES))
    p.add_argument("--object", default="red circle")
    p.add_argument("--max-objects", type=int, default=10, metavar="M",
                   help="app.batch --max-objects (default 10: a request decodes at most 3*M+1 steps)")
    p.add_argument("--max-batch", type=int, default=None, metavar="N", help="app.batch --max-batch (default: its own)")
    p.add_argument("--window", type=int, default=None, metavar="N", help="app.batch --window (default: its own)")
    p.add_argument("--replicas", type=int, default=1, metavar="R", help="ray: engine replicas")
    p.add_argument("--address", default=None, metavar="ADDR", help="ray: join this cluster instead of starting one")
    p.add_argument("--baseline", type=int, default=0, metavar="N0",
                   help="also run each mode on the first N0 images, for the marginal rate (default: off)")
    p.add_argument("--tol", type=float, default=1e-6, help="float tolerance when comparing results (default 1e-6)")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="kill a child after S seconds")
    p.add_argument("--workdir", default=None, metavar="DIR",
                   help="images, checkpoint, outputs (default: a new temp dir)")
    p.add_argument("--out-json", default=None, metavar="FILE")
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or any(m not in MODES for m in args.modes) or len(set(args.modes)) != len(args.modes):
        p.error(f"--modes takes distinct names from {', '.join(MODES)}")
    if args.images < 1:
        p.error("--images must be at least 1")
    if not 0 <= args.baseline < args.images:
        p.error("--baseline must be 0 (off) or less than --images")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-batch-"))
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = workdir.resolve()
    weights = Path(args.weights).resolve() if args.weights else random_checkpoint(workdir, args.preset, args.seed)
    started = time.perf_counter()
    files = make_images(workdir / "images", args.images, args.size, args.format, args.seed)
    print(f"{len(files)} images ({args.size[0]}-{args.size[1]} px, {args.format}) in {workdir / 'images'} "
          f"[{time.perf_counter() - started:.1f} s]; weights {weights}", flush=True)

    runs: list[Run] = []
    for mode in args.modes:
        run = run_mode(batch_command(args, mode, workdir / "images", workdir / f"out-{mode}", weights), mode,
                       args.images, workdir / f"out-{mode}", args.timeout)
        if args.baseline:
            out = workdir / f"out-{mode}-first{args.baseline}"
            run.baseline = run_mode(batch_command(args, mode, workdir / "images", out, weights, limit=args.baseline),
                                    mode, args.baseline, out, args.timeout)
            if run.wall_s > run.baseline.wall_s:
                run.marginal_images_per_s = (args.images - args.baseline) / (run.wall_s - run.baseline.wall_s)
        runs.append(run)
        for r in (run, run.baseline):
            if r is not None:
                print(f"{mode} ({r.images} images): rc {r.rc}, {r.wall_s:.2f} s wall, app.batch: "
                      f"{_num(r.app_images_per_s, '.1f')} images/s", flush=True)

    failed = [r for r in runs + [r.baseline for r in runs if r.baseline] if r.rc != 0 or r.app_images != r.images]
    for r in failed:
        print(f"FAILED: {r.mode} ({r.images} images): rc {r.rc}, app.batch reported {r.app_images} images; "
              f"command: {shlex.join(r.command)}\n{r.tail}", file=sys.stderr)

    match: bool | None = None
    mismatched: list[str] = []
    if len(runs) == 2 and all(Path(r.out, "results.jsonl").is_file() for r in runs):
        mismatched = compare(load_results(Path(runs[0].out)), load_results(Path(runs[1].out)), args.tol)
        match = not mismatched
        if mismatched:
            print(f"\n!!! MISMATCH: {len(mismatched)} of {args.images} images have different results in "
                  f"{runs[0].out} and {runs[1].out} (first: {', '.join(mismatched[:5])}) !!!\n", file=sys.stderr)

    gpu = device_name(args.device)
    dtype = resolve(args.device, args.dtype)[1]   # the name app.batch resolved "auto" to
    print(f"\n{args.preset or weights.name} {dtype} on {gpu} ({args.device}); {args.images} images, "
          f"detect {args.object!r}, max_objects {args.max_objects}")
    print(table(runs))
    ratio = ratios(runs)
    if ratio:
        print("ray/single: " + ", ".join(f"{k.replace('_images_per_s', '')} {_num(v, '.3f')}"
                                         for k, v in ratio.items()))
    if match is not None:
        print(f"results: {'identical' if match else f'DIFFERENT for {len(mismatched)} images'} "
              f"(every field but ms, floats within {args.tol:g})")

    if args.out_json:
        info = {"gpu": gpu, "device": args.device, "dtype": dtype, "preset": args.preset, "weights": str(weights),
                "images": args.images, "size": list(args.size), "format": args.format, "object": args.object,
                "max_objects": args.max_objects, "python": platform.python_version(),
                "torch": version("torch"), "ray": version("ray"), "workdir": str(workdir),
                "runs": [{**asdict(r), "command_str": shlex.join(r.command),
                          "baseline": None if r.baseline is None else {**asdict(r.baseline),
                                                                      "command_str": shlex.join(r.baseline.command)}}
                         for r in runs],
                "ratio_ray_over_single": ratio, "results_match": match, "mismatched": mismatched[:50]}
        Path(args.out_json).write_text(json.dumps(info, indent=2))
    return 1 if failed or match is False else 0


if __name__ == "__main__":
    raise SystemExit(main())
