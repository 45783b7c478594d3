#!/bin/bash
# x4 session driver (fifth session): why does k61 sit at chance on generated Pathfinder?
# GPUs 0-2: k61 on all three difficulties (val/test hard), 19-minute budget, 1,000-step warmup:
#   seed 0, seed 1, seed 0 with the intensity pixel encoding. GPU 3: k61 on easy alone, and
#   the 2-D CNN control on the hard split the runs use (160,000 training images).
S=/tmp/sess; mkdir -p $S; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false arm=locality_k61 task=pathfinder profile=budget"
T0=$SECONDS
log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
log start; nvidia-smi -L > $S/gpus.txt
CUDA_VISIBLE_DEVICES=0 $R task.difficulty=all budget.minutes=0.05 workers=60 output_dir=outputs/prep > $S/prep.log 2>&1
log prepdone
W="+train.warmup_steps=1000 budget.minutes=19"
CUDA_VISIBLE_DEVICES=0 $R task.difficulty=all $W output_dir=outputs/all_w_s0 > $S/all_w_s0.log 2>&1 &
A=$!
CUDA_VISIBLE_DEVICES=1 $R task.difficulty=all $W seed=1 output_dir=outputs/all_w_s1 > $S/all_w_s1.log 2>&1 &
B=$!
CUDA_VISIBLE_DEVICES=2 $R task.difficulty=all $W +model.token_encoding=intensity output_dir=outputs/all_w_int > $S/all_w_int.log 2>&1 &
C=$!
CUDA_VISIBLE_DEVICES=3 $R task.difficulty=easy $W output_dir=outputs/easy_w_s0 > $S/easy_w_s0.log 2>&1 &
D=$!
CUDA_VISIBLE_DEVICES=3 python experiments/pathfinder_control.py --difficulty hard --task-cache .cache/lra-repro --minutes 17 --out $S/control_hard_160k.json > $S/control_hard.log 2>&1 &
E=$!
wait $E; log control_done
wait $A $B $C $D; log ALLDONE
