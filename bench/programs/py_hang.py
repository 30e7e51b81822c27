"""A hung Python job for bench/run-attach-bt.sh: every rank but the last waits in
Barrier() called from step(), the last never arrives, looping in compute() called from
step() (tests/programs/mpi_hang.c in Python). Under MPI (mpi4py, `--mpi`) the barrier is
MPI's; started by a plain shell loop (RANK and WORLD_SIZE set), the waiting ranks sleep in
a Barrier of their own. Each rank prints `ready RANK PID` once it is up."""

import os
import sys
import time


class SleepingBarrier:
    """The shell loop's stand-in for a communicator: Barrier() never returns."""

    def Barrier(self):
        while True:
            time.sleep(3600)


def compute():
    work = 0
    while True:
        work += 1


def step(comm, rank, size):
    if rank == size - 1:
        compute()
    comm.Barrier()


def main():
    if "--mpi" in sys.argv[1:]:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
    else:
        comm = SleepingBarrier()
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    print(f"ready {rank} {os.getpid()}", flush=True)
    step(comm, rank, size)


if __name__ == "__main__":
    main()
