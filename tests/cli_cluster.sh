#!/usr/bin/env bash
# Three replicas of `gemma serve` in network namespaces behind HAProxy (deploy/haproxy/haproxy.cfg), scraped
# by Prometheus (tests/cluster/test_cluster.py). Skips (77) without root, haproxy or prometheus.
MODEL=${GEMMA_MODEL:-$2/models/gemma-3-270m-q4_k_m.gguf}
[ -f "$MODEL" ] || { echo "skip: no model at $MODEL"; exit 77; }
exec python3 "$2/tests/cluster/test_cluster.py" "$1" "$MODEL" "$2"
