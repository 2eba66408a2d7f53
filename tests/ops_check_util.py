"""Plumbing shared by ops_npy_check.py and ops_python_client_check.py: a
kernelserve --backend=cpu on a free loopback port, its shutdown, the seed and
the final verdict."""
import os
import re
import subprocess
import sys
import time


def fresh_seed(seed):
    """`seed`, or a fresh one; printed either way so that a failure can be rerun."""
    seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little")
    print("seed", seed)
    return seed


def start_server(binary, workdir, extra_args=()):
    """Starts the server on port 0 and returns (process, the port it reports)."""
    log_path = os.path.join(workdir, "server.log")
    proc = subprocess.Popen([binary, "--listen=127.0.0.1:0", "--backend=cpu", "--cpu_threads=2"] + list(extra_args),
                            stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    for _ in range(400):
        m = re.search(r"listening on port (\d+)", open(log_path).read())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    sys.exit("kernelserve did not start:\n" + open(log_path).read())


def stop_server(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def finish(start, seed, failures):
    """Prints the time and the verdict; exits 1 on any failure."""
    print("%.1f s" % (time.time() - start))
    if failures:
        print("FAILED (seed %d):\n  %s" % (seed, "\n  ".join(failures)))
        sys.exit(1)
    print("PASSED")
