#!/bin/bash
# Tenth session, one H200: does max pooling let the K=61 model generalise on generated Pathfinder?
# A: easy, Table 7 depth 6, batch norm, max pooling (diagnostic: one window settles 81% of easy images)
# B: hard, depth 12, batch norm, max pooling (depth 12 windows settle 92% of hard images)
# C: as B with appendix C's D4 augmentation (against the memorising seen in sessions 5-8)
# Start: (setsid nohup bash .gpu/sessN.sh > /tmp/sessN.out 2>&1 < /dev/null &); poll: bash .gpu/poll.sh ALLDONE 560
S=/tmp/sess; mkdir -p $S; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false arm=locality_k61 task=pathfinder profile=budget"
M="${MINUTES:-20}"
T0=$SECONDS; log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
log start; nvidia-smi -L > $S/gpus.txt
python experiments/bench_conv.py --kernels 61 --impls bf16 toeplitz fft tf32 bf16_flip_tf32w --out $S/bench_conv.json > $S/bench_conv.log 2>&1
log benchdone
export LRA_CONV_AUTO_TABLE=$S/bench_conv.json
$R task.difficulty=easy budget.minutes=0.02 workers=8 output_dir=outputs/prepE > $S/prepE.log 2>&1 &
$R budget.minutes=0.02 workers=8 output_dir=outputs/prepH > $S/prepH.log 2>&1 &
wait; log prepdone
$R task.difficulty=easy ++model.norm=batch ++model.pooling=max budget.minutes=$M output_dir=outputs/A_easy_bn_max > $S/A.log 2>&1 &
$R ++model.norm=batch ++model.pooling=max ++model.depth=12 budget.minutes=$M output_dir=outputs/B_hard_bn_max_d12 > $S/B.log 2>&1 &
$R techniques=followup task.difficulty=hard ++techniques.tasks.pathfinder.augment.d4=true ++model.norm=batch ++model.pooling=max ++model.depth=12 budget.minutes=$M output_dir=outputs/C_hard_bn_max_d12_d4 > $S/C.log 2>&1 &
wait; log ALLDONE
