"""A hung mpi4py job (tests/tests/python.rs): every rank but the last waits in
comm.Barrier() called from step(); the last never arrives, looping in compute() called
from step(). Prints "ready" on every rank once MPI is up."""

from mpi4py import MPI


def compute():
    work = 0
    # One line: every instruction of the loop is on it.
    while True: work += 1  # compute: the late rank's loop


def step(comm):
    if comm.Get_rank() == comm.Get_size() - 1:
        compute()  # step: the late rank
    comm.Barrier()  # step: the waiting ranks


comm = MPI.COMM_WORLD
print("ready", flush=True)
step(comm)  # module: the call
