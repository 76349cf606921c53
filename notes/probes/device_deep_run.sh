#!/bin/bash
# The device machine's deep run (copy to .tpu/final.sh beside the shardlaw wheel, hypothesis, sortedcontainers,
# attrs, optax and absl-py wheels and steps_deep.py; carry [".tpu"]). See notes/deep-runs-2026-12-06.md.
# usage: .tpu/final.sh N_PROP N_COLL N_STEPS BASE  (12 processes each; 0 skips a suite)
pip install -q --no-deps --no-index --target /tmp/site .tpu/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PYTHONPATH JAX_PLATFORMS=cpu
P=$1; C=$2; M=$3; B=$4; R=/tmp/res; rm -rf $R; mkdir -p $R
t0=$(date +%s)
if [ $P != 0 ]; then for i in $(seq 0 11); do python -m shardlaw.properties.propagation_harness $P $((B+i)) > $R/prop_$i.json 2>$R/prop_$i.err & done; wait; echo prop $(( $(date +%s)-t0 )); (cd $R && tar czf $OUT/res.tgz .); fi
if [ $C != 0 ]; then for i in $(seq 0 11); do python -m shardlaw.properties.collectives_harness $C $((B+100+i)) > $R/coll_$i.json 2>$R/coll_$i.err & done; wait; echo coll $(( $(date +%s)-t0 )); (cd $R && tar czf $OUT/res.tgz .); fi
if [ $M != 0 ]; then for i in $(seq 0 11); do python .tpu/steps_deep.py $M $((B+200+i)) > $R/steps_$i.txt 2>$R/steps_$i.err & done; wait; echo steps $(( $(date +%s)-t0 )); fi
for f in $R/*.err; do grep -v "SPMD will replicate\|^$" $f | tail -c 2000 > $f.t; mv $f.t $f; [ -s $f ] || rm $f; done
cd $R && tar czf $OUT/res.tgz . && ls $R | wc -l
