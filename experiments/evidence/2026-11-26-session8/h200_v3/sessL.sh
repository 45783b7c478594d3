#!/bin/bash
# One H200 (eighth session): render version 3 (target contours dimmer than distractors, as the
# release draws them), generated hard Pathfinder. A: the exact acceptance line (Table 7's k61,
# layer norm). B: the same with batch norm. Side by side, 20-minute budgets.
# Start: (setsid nohup bash .gpu/sessL.sh > /tmp/x.out 2>&1 < /dev/null &); poll: bash .gpu/pollE.sh ALLDONE 540
S=/tmp/sess; mkdir -p $S; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false arm=locality_k61 task=pathfinder profile=budget"
T0=$SECONDS; log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
log start; nvidia-smi -L > $S/gpus.txt
$R budget.minutes=0.02 workers=16 output_dir=outputs/prepL > $S/prep.log 2>&1
log prepdone
$R budget.minutes=20 output_dir=outputs/v3_ln_hard > $S/v3_ln_hard.log 2>&1 &
A=$!
$R ++model.norm=batch budget.minutes=20 output_dir=outputs/v3_bn_hard > $S/v3_bn_hard.log 2>&1 &
B=$!
wait $A $B; log ALLDONE
