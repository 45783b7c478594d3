#!/bin/bash
# One H200 (fifth session, second machine): k61 on generated Pathfinder hard with batch norm, 6-minute budget.
S=/tmp/sess; mkdir -p $S; cd "$(dirname "$0")/.."
T0=$SECONDS
log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
log start; nvidia-smi -L > $S/gpus.txt
python experiments/run.py progress=false arm=locality_k61 task=pathfinder profile=budget budget.minutes=6 ++model.norm=batch workers=16 output_dir=outputs/hard_bn > $S/hard_bn.log 2>&1
log ALLDONE
