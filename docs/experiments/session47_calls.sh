#!/bin/bash
# Session 47: the rotary, K/V write and GELU inside the decode attention's launch (`rope_attention`), on the
# lent GPU, against the two commits before it, and the whole engine.loadbench table.
#   OUT=DIR bash docs/experiments/session47_calls.sh bench  (engine.bench --batch 1,32,64 --max-len 1024 of
#                                                          .wt/old = bdeb3a0, .wt/pdl = 1d31260 and this tree,
#                                                          twice in rotated order; verify and the one-image check
#                                                          of this tree)
#   OUT=DIR bash docs/experiments/session47_calls.sh table  (this tree's whole engine.loadbench table; detect
#                                                          unique c=1,64 of .wt/pdl; engine.profile of this tree)
#   OUT=DIR bash docs/experiments/session47_calls.sh gated  (engine.bench of this tree and .wt/pdl, one round: the
#                                                          call after `all`, once one launch was kept to the
#                                                          64-key shape)
#   OUT=DIR bash docs/experiments/session47_calls.sh all    (one call: bench round 1 of this tree and .wt/pdl,
#                                                          the checks, the table, bench round 2 with .wt/old,
#                                                          the profile, in that order)
# Results in $OUT/results.tgz, re-packed after each stage.
source docs/experiments/device_env.sh
R=$OUT/r; mkdir -p $R
pack() { tar czf $OUT/results.tgz -C $OUT r; }
pdl() { (cd "$here/.wt/pdl" && python3 -m "$@"); }
variant() {  # $1: old | pdl | new
  case $1 in old) old "${@:2}" ;; pdl) pdl "${@:2}" ;; new) new "${@:2}" ;; esac
}
bench() {  # $1: variant, $2: round
  variant $1 engine.bench --device cuda --batch 1,32,64 --max-len 1024 --json $R/bench-$1-$2.json > $R/bench-$1-$2.txt 2>&1
  echo "$1 $2: $(grep -E '^ *(1|32|64) ' $R/bench-$1-$2.txt | awk '{printf "%s ", $0}')"
}
checks() {
  new engine.verify --weights assets/model --device cuda --dtype bf16 2>&1 | tail -1 | tee $R/verify-bf16.txt
  new engine.verify --weights assets/model --device cuda --dtype fp32 2>&1 | tail -1 | tee $R/verify-fp32.txt
  python3 docs/experiments/one_image_check.py > $R/one-image.txt 2>&1; grep -E "PASS|FAIL" $R/one-image.txt; pack
}
table() {
  new engine.loadbench --device cuda --json $R/loadbench.json > $R/loadbench.txt 2>&1; tail -16 $R/loadbench.txt; pack
}
profile() {
  new engine.profile --images 8 --batch 1,64 --json $R/profile.json > $R/profile.txt 2>&1; grep -A12 "decode step" $R/profile.txt; pack
}
case $1 in
  all)
    for v in new pdl; do bench $v 1; done; pack
    checks
    table
    for v in old pdl new; do bench $v 2; done; pack
    profile
    ;;
  gated)
    for v in new pdl; do bench $v 3; done; pack
    ;;
  bench)
    for v in new pdl old; do bench $v 1; done; pack
    checks
    for v in old pdl new; do bench $v 2; done; pack
    ;;
  table)
    table
    pdl engine.loadbench --device cuda --tasks detect --modes unique --conc 1,64 --json $R/ab-pdl.json > $R/ab-pdl.txt 2>&1
    grep -E "^detect" $R/ab-pdl.txt | head -2; pack
    profile
    ;;
esac
