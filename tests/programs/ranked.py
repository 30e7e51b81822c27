"""A rank of a job its launcher started without MPI (tests/any_launcher.rs): a shell loop
sets each copy's rank in the variable named by argv[1]. The rank named by argv[2] computes
in compute() called from step(); the others sleep in wait() called from step(). Prints
"ready" once running."""

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
step()
