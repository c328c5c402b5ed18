#!/usr/bin/env bash
# `gemma serve` as a load balancer sees it: /health while loading, ready, draining; SIGTERM drains, SIGINT
# stops; the replica id; the prefix-cache counters (tests/server/test_lifecycle.py).
exec bash "$2/tests/server/run.sh" test_lifecycle.py "$1" "$2"
