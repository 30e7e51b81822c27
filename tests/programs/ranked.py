"""A rank of a job its launcher started without MPI (tests/any_launcher.rs): a shell loop
sets each copy's rank in the variable named by argv[1]. The rank named by argv[2] computes
in compute() called from step(); the others sleep in wait() called from step(). Prints
"ready" once running; with SDM_TEST_READY_DIR set, creates the file DIR/RANK before
step() too (tests/flame.rs waits for every rank's)."""

import os
import sys
import time

RANK = int(os.environ[sys.argv[1]])
BUSY = int(sys.argv[2])


def compute():
    x = 0
    while True:
        x += 1


def wait():
    while True:
        time.sleep(60)


def step():
    if RANK == BUSY:
        compute()
    else:
        wait()


sys.stdout.write("ready\n")
sys.stdout.flush()
if "SDM_TEST_READY_DIR" in os.environ:
    open(os.path.join(os.environ["SDM_TEST_READY_DIR"], str(RANK)), "w").close()
step()
