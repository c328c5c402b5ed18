#!/usr/bin/env bash
# `gemma serve` under hostile traffic (tests/server/test_hardening.py): bounded work and memory per
# request, slow and idle connections, the Host check, forged turns, queue and shutdown behaviour,
# prefix-cache scopes. Uses loopback addresses 127.0.0.2-5 as other clients.
exec bash "$2/tests/server/run.sh" test_hardening.py "$1" "$2"
