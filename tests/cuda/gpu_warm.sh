#!/bin/bash
# Starts the peers' first compilation detached (Triton for fla's
# chunk_linear_attn, inductor for the torch.compile peers), so that a
# backward step later in the same machine's life (the next device call while
# it is warm) finds their on-disk caches filled and times them within its cap.
# It runs beside the harness: its own timings are not the ones reported (they
# are in $LA_WARM_LOG, default /tmp/la_warm_peers.log, which gpu_backward.sh
# copies into its logs). Returns at once.
#   bash tests/cuda/gpu_warm.sh        (LA_WARM_PEERS: default fla,linear,mhla,focused)
LOG=${LA_WARM_LOG:-/tmp/la_warm_peers.log}
PEERS=${LA_WARM_PEERS:-fla,linear,mhla,focused}
setsid nohup nice -n 10 timeout 900 python3 bench/gpu_backward.py --driver none \
    --peers "$PEERS" --timeout 420 > "$LOG" 2>&1 < /dev/null &
# the torch.compile peers of the shapes step (gpu_shapes.sh: the Wan shape's
# mhla_torch and the official MHLA chunk loop), when LA_WARM_SHAPES=1
OFF=${LA_MHLA_OFFICIAL:-peers/mhla/mhla_nlp/fla/ops/mhla/naive.py}
if [ "${LA_WARM_SHAPES:-0}" = 1 ]; then
  setsid nohup nice -n 10 bash -c "timeout 300 python3 bench/gpu_linear.py --peer wan; \
      [ -f '$OFF' ] && timeout 600 python3 dev/bench_mhla_causal_torch.py --official '$OFF' --ns 32768 --reps 2" \
      > "${LOG%.log}_shapes.log" 2>&1 < /dev/null &
fi
echo "# peers warming in the background (pid $!, log $LOG): $PEERS"
