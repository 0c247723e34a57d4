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
echo "# peers warming in the background (pid $!, log $LOG): $PEERS"
