#!/bin/bash
# x4 session driver: conv bench + data prep, then issue 2 (k61 ListOps 10 min, GPU0), issue 3 (s4
# Pathfinder 10 min, GPU3), issue 9 (DDP on GPUs 1,2, 3 min), then the v0.1 grid on every free GPU.
S=/tmp/sess; mkdir -p $S; cd "$(dirname "$0")/.."
R="python experiments/run.py progress=false"
T0=$SECONDS; END=$((T0 + ${DEADLINE_S:-1440}))
log(){ echo "$1 $((SECONDS-T0))s $(date -u +%T)" >> $S/driver.log; }
left(){ python -c "print(max(0.0, ($END - $SECONDS) / 60))"; }
log start; nvidia-smi -L > $S/gpus.txt
CUDA_VISIBLE_DEVICES=0 python experiments/bench_conv.py --kernels 61 --impls tf32 bf16 fft bf16_tf32bwd bf16_flip_tf32w bf16_flip_mmw --out $S/bench_conv.json > $S/bench_conv.log 2>&1 &
P="profile=budget budget.minutes=0.05 output_dir=outputs/prep"
CUDA_VISIBLE_DEVICES=1 $R arm=locality_k5 task=listops $P workers=12 > $S/prep_listops.log 2>&1 &
CUDA_VISIBLE_DEVICES=2 $R arm=locality_k5 task=text $P > $S/prep_text.log 2>&1 &
CUDA_VISIBLE_DEVICES=3 $R arm=s4 task=pathfinder $P workers=32 > $S/prep_pf.log 2>&1 &
wait; log prepdone
export LRA_CONV_AUTO_TABLE=$S/bench_conv.json
CUDA_VISIBLE_DEVICES=0 $R arm=locality_k61 task=listops profile=budget budget.minutes=10 > $S/k61_listops10.log 2>&1 &
A=$!
CUDA_VISIBLE_DEVICES=3 $R arm=s4 task=pathfinder profile=budget budget.minutes=10 > $S/s4_pf10.log 2>&1 &
B=$!
CUDA_VISIBLE_DEVICES=1,2 python -m torch.distributed.run --standalone --nproc_per_node=2 experiments/run.py arm=locality_k61 task=listops profile=budget budget.minutes=3 output_dir=outputs/ddp2 progress=false > $S/ddp2.log 2>&1
log ddpdone
G="python experiments/run_grid.py experiments/grids/v0.1-budget.yaml --claim-dir $S/claims"
$G --gpus 1,2 --deadline-minutes $(left) > $S/gridA.log 2>&1 &
wait $A $B; log longdone
$G --gpus 0,3 --deadline-minutes $(left) > $S/gridB.log 2>&1
wait; log ALLDONE
