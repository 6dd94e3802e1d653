#!/bin/bash
# How the session-31 and session-32 H200 calls were run (README, "Session 31: several HTTP server
# processes on one port" and "Session 32"): in-process rows and servers interleaved in one call, so
# every HTTP ratio has in-process rows of the same call to divide by. Note: since session 32
# `python -m app.serve` starts 4 HTTP processes by default on a CUDA host with 8+ cores
# (`--http-workers auto`), so a plan item without --http-workers is no longer a one-process server
# there; pass --http-workers,1 for that.
#
#   OUT=DIR [TASKS=detect,point] [MODES=same] [PER=8] [CLIENTS=4] bash docs/experiments/serve_calls.sh PLAN...
#
# PLAN items, run in order:
#   inproc                      python -m engine.loadbench in-process (c=32, max_batch 32)
#   http:NAME:FLAGS:RUNS[:CPS]  python -m app.serve with FLAGS (comma-separated, e.g. --http-workers,4),
#                               driven RUNS times by the same loadbench with --url, then stopped with SIGINT;
#                               CPS (e.g. 4+8) cycles the runs' client processes (default $CLIENTS)
# e.g. bash docs/experiments/serve_calls.sh inproc http:w1::2 http:w4:--http-workers,4:2 inproc
# Each run's table goes to $OUT/rNAME.json, the servers' logs to $OUT/server-N.log. On the device
# machine the wheels it lacks were installed first (the device README), into /tmp/site:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .wt/whl/*.whl
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d /tmp/ckpt ] || python3 -m engine.loadbench --device cuda --save-checkpoint /tmp/ckpt 2>&1 | tail -2
LB="python3 -m engine.loadbench --device cuda --tasks ${TASKS:-detect,point} --modes ${MODES:-same} --conc 32 --per-client ${PER:-8} --max-batch 32"
n=0
for item in "$@"; do
  n=$((n+1))
  date +%T; echo "=== $n $item"
  case $item in
    inproc) timeout 200 $LB --json "$OUT/r$n-inproc.json" 2>&1 | grep -v "^\s*$" ;;
    http:*)
      IFS=: read -r _ name flags reps cps <<<"$item"
      IFS=+ read -r -a cpl <<<"${cps:-${CLIENTS:-}}"
      python3 -m app.serve --weights /tmp/ckpt --no-repeat-guard --device cuda --dtype bf16 --max-batch 32 \
        --max-queue 1024 ${flags//,/ } > "$OUT/server-$n.log" 2>&1 &
      spid=$!
      for i in $(seq 120); do curl -sf http://127.0.0.1:2020/health >/dev/null && break; sleep 1; done
      echo "server up after ${i}s"
      for r in $(seq "${reps:-1}"); do
        cp=${cpl[$(( (r - 1) % (${#cpl[@]} > 0 ? ${#cpl[@]} : 1) ))]:-}
        echo "--- run $r${cp:+, $cp client processes}"
        timeout 200 $LB --url http://127.0.0.1:2020/v1 ${cp:+--client-processes $cp} \
          --json "$OUT/r$n-$name-$r.json" 2>&1 | grep -v "^\s*$"
      done
      kill -INT $spid; for i in $(seq 60); do kill -0 $spid 2>/dev/null || break; sleep 1; done
      if kill -0 $spid 2>/dev/null; then
        echo "server did not stop in 60 s"; kill -9 $spid; pkill -9 -f spawn_main; sleep 2
      fi
      echo "server stopped after ${i}s"; tail -3 "$OUT/server-$n.log" ;;
  esac
done
date +%T
