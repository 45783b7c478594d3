#!/bin/bash
# Tenth session, second hold (one H200): the pixel read as an intensity (one linear map of id/255,
# as S4's own pixel encoder) with batch norm, where the learned per-grey-level embedding could
# serve as a per-image fingerprint (the K=61 model memorised easy images in the first hold).
# D: arm=s4 (S4D, the S4 repository's Pathfinder settings: H 256, depth 6, lr 0.004, batch 64) on hard
# E: arm=locality_k61 (Table 7, depth 6) on easy
# Start: (setsid nohup bash .gpu/sessO.sh > /tmp/sessO.out 2>&1 < /dev/null &); poll: bash .gpu/poll.sh ALLDONE 560
S=/tmp/sess; mkdir -p $S; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false task=pathfinder profile=budget"
M="${MINUTES:-19}"
T0=$SECONDS; log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
log start; nvidia-smi -L > $S/gpus.txt
$R arm=locality_k61 task.difficulty=easy budget.minutes=0.02 workers=8 output_dir=outputs/prepE > $S/prepE.log 2>&1 &
$R arm=locality_k61 budget.minutes=0.02 workers=8 output_dir=outputs/prepH > $S/prepH.log 2>&1 &
wait; log prepdone
$R arm=s4 ++model.norm=batch ++model.token_encoding=intensity budget.minutes=$M output_dir=outputs/D_s4_hard_bn_int > $S/D.log 2>&1 &
$R arm=locality_k61 task.difficulty=easy ++model.norm=batch ++model.token_encoding=intensity budget.minutes=$M output_dir=outputs/E_k61_easy_bn_int > $S/E.log 2>&1 &
wait; log ALLDONE
