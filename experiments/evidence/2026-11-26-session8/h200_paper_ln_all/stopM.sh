#!/bin/bash
# End of a hold: SIGTERM the long run (it checkpoints), wait, and send the run folder back through $OUT.
S=/tmp/sess; kill -TERM $(cat $S/run.pid); for i in $(seq 60); do grep -q ALLDONE $S/driver.log && break; sleep 2; done
cat $S/driver.log; tail -n 3 $S/paper_ln_all.log; python .gpu/peek.py
mkdir -p $OUT/run $OUT/logs; cp $S/*.log $S/gpus.txt $OUT/logs/
d=$(find outputs/paper_ln_all -name last.pt | head -1); r=$(dirname $(dirname $d)); echo $r
cp $d $OUT/run/last.pt; cp $r/*.csv $r/*.json $r/*.yaml $OUT/run/ 2>/dev/null; ls -la $OUT/run
