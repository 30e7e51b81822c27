"""Two Python threads (tests/tests/python.rs): `spinner` loops holding the GIL, `napper`
sleeps; the main thread waits to join them. Prints "ready" once both have started."""

import threading
import time

started = threading.Barrier(3)


def spin():
    started.wait()
    work = 0
    # One line: every instruction of the loop is on it.
    while True: work += 1  # spin: holds the GIL


def nap():
    started.wait()
    while True:
        time.sleep(1000)  # nap: asleep


spinner = threading.Thread(target=spin, name="spinner", daemon=True)
napper = threading.Thread(target=nap, name="napper", daemon=True)
spinner.start()
napper.start()
started.wait()
print("ready", flush=True)
napper.join()  # main: waits
