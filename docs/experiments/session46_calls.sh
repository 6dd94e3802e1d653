#!/bin/bash
# Session 46: programmatic dependent launch (PDL) for the engine's Triton kernels, on the lent GPU.
#   OUT=DIR bash docs/experiments/session46_calls.sh pdl    (engine.bench: .wt/old, PDL off, PDL on, twice in rotated
#                                                          order; verify and the one-image check. Run in session 46 at a
#                                                          revision that also swept an L2 prefetch, variants pdl-2 and
#                                                          pdl-4; see pdl_bench.py)
#   OUT=DIR bash docs/experiments/session46_calls.sh table  (engine.bench .wt/old / this tree, verify, one-image check,
#                                                          this tree's whole engine.loadbench table, then detect unique
#                                                          c=1,64 of .wt/old)
# Results in $OUT/results.tgz, re-packed after each stage.
source docs/experiments/device_env.sh
R=$OUT/r; mkdir -p $R
pack() { tar czf $OUT/results.tgz -C $OUT r; }
variant() {  # $1: old | pdl-off | pdl-0 (PDL on)
  case $1 in
    old) old "${@:2}" ;;
    pdl-off) python3 docs/experiments/pdl_bench.py 0 "${@:2}" ;;
    pdl-0) python3 docs/experiments/pdl_bench.py 1 "${@:2}" ;;
  esac
}
bench() {  # $1: variant, $2: round
  variant $1 engine.bench --device cuda --batch 1,32,64 --max-len 1024 --json $R/bench-$1-$2.json > $R/bench-$1-$2.txt 2>&1
  echo "$1 $2: $(grep -E '^ *(1|32|64) ' $R/bench-$1-$2.txt | awk '{printf "%s ", $0}')"
}
checks() {
  variant pdl-0 engine.verify --weights assets/model --device cuda --dtype bf16 2>&1 | tail -1 | tee $R/verify-bf16.txt
  variant pdl-0 engine.verify --weights assets/model --device cuda --dtype fp32 2>&1 | tail -1 | tee $R/verify-fp32.txt
  variant pdl-0 docs/experiments/one_image_check.py > $R/one-image.txt 2>&1; grep -E "PASS|FAIL" $R/one-image.txt; pack
}
case $1 in
  pdl)
    for v in old pdl-off pdl-0; do bench $v 1; done; pack
    checks
    for v in pdl-0 pdl-off old; do bench $v 2; done; pack
    ;;
  table)
    bench pdl-0 1; bench old 1; pack
    checks
    new engine.loadbench --device cuda --json $R/loadbench.json > $R/loadbench.txt 2>&1; tail -16 $R/loadbench.txt; pack
    old engine.loadbench --device cuda --tasks detect --modes unique --conc 1,64 --json $R/ab-old.json > $R/ab-old.txt 2>&1
    grep -E "^detect" $R/ab-old.txt | head -2; pack
    ;;
esac
