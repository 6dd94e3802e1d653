#!/bin/bash
# Session 48, one device call: session 47's measurements (its functions, docs/experiments/session47_calls.sh)
# of the committed default against bdeb3a0 (.wt/old) and 1d31260 (.wt/pdl), with the FP8 vision probe
# (docs/experiments/fp8_vision_probe.py) after the whole table. Results in $OUT/results.tgz, re-packed
# after each stage, in priority order.
#   OUT=DIR bash docs/experiments/session48_calls.sh
source docs/experiments/session47_calls.sh none
for v in new pdl; do bench $v 1; done; pack
checks
table
python3 docs/experiments/fp8_vision_probe.py --json $R/fp8-probe.json > $R/fp8-probe.txt 2>&1; tail -8 $R/fp8-probe.txt; pack
for v in old pdl new; do bench $v 2; done; pack
profile
