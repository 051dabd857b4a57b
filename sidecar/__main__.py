"""`python -m sidecar worker INDEX FD`: one worker of a `kpd run`, started by `sidecar.workers`
with the sidecar's listening socket as FD (not a command for users)."""

import sys

from foundation.config import load_settings
from sidecar.run import run_worker

if sys.argv[1:2] != ["worker"] or len(sys.argv) != 4:
    sys.exit("usage: python -m sidecar worker INDEX FD (started by `kpd run`)")
sys.exit(run_worker(load_settings(), int(sys.argv[2]), int(sys.argv[3])))
