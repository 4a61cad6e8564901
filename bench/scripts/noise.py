#!/usr/bin/env python3
# Usage (root): python3 bench/scripts/noise.py BURN_MS PERIOD_MS & — then run the tests; kill the
# process group when done (pkill -f noise.py).
# Adversarial noise for the e2e suite: on each CPU, a SCHED_FIFO thread (in its own process)
# that burns BURN ms every PERIOD ms, like a neighbour the guest cannot see past.
import os, sys, time
burn = float(sys.argv[1]) / 1000 if len(sys.argv) > 1 else 0.005
period = float(sys.argv[2]) / 1000 if len(sys.argv) > 2 else 0.050
for cpu in range(os.cpu_count()):
    if os.fork() == 0:
        os.sched_setaffinity(0, {cpu})
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(5))
        off = cpu * period / 2
        time.sleep(off)
        while True:
            t = time.monotonic()
            while time.monotonic() - t < burn:
                pass
            time.sleep(period - burn)
os.wait()
