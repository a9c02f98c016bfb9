"""Owner liveness (payments/owners.py): a real process holds its lock while it
lives, and the kernel frees it when the process is SIGKILLed."""

from __future__ import annotations

import signal
import subprocess
import sys

from payments import owners
from tests.test_cli import REPO

HOLD = """
import sys
from pathlib import Path
from payments.owners import ProcessLock
lock = ProcessLock(Path(sys.argv[1]))
print(lock.token, flush=True)
sys.stdin.read()  # hold it until killed
"""


def holder(state_dir) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(state_dir)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc, proc.stdout.readline().strip()


def test_a_live_process_is_alive_and_a_killed_one_is_dead(tmp_path):
    proc, token = holder(tmp_path)
    try:
        assert owners.probe(tmp_path, token) == owners.ALIVE
        assert owners.probe(tmp_path, token) == owners.ALIVE  # probing does not take the lock away
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stdin.close()
        proc.stdout.close()
    assert owners.probe(tmp_path, token) == owners.DEAD
    assert (owners.owners_dir(tmp_path) / f"{token}.lock").exists()  # the proof stays


def test_an_owner_without_a_lock_file_here_is_unknown(tmp_path):
    assert owners.probe(tmp_path, "12-0123456789ab") == owners.UNKNOWN
    assert owners.probe(tmp_path, "../../etc/passwd") == owners.UNKNOWN
    assert owners.probe(tmp_path, "") == owners.UNKNOWN


def test_this_process_lock_is_held_until_closed(tmp_path):
    lock = owners.ProcessLock(tmp_path)
    assert owners.probe(tmp_path, lock.token) == owners.ALIVE
    lock.close()
    assert owners.probe(tmp_path, lock.token) == owners.DEAD


def test_sweep_deletes_dead_owners_files_except_those_still_needed(tmp_path):
    live = owners.ProcessLock(tmp_path)
    try:
        folder = owners.owners_dir(tmp_path)
        for token in ("1-aaaaaaaaaaaa", "2-bbbbbbbbbbbb"):
            (folder / f"{token}.lock").touch()  # what two killed processes left
        assert owners.sweep(tmp_path, keep={"2-bbbbbbbbbbbb"}) == 1
        left = sorted(p.name for p in folder.iterdir())
        assert left == sorted(["2-bbbbbbbbbbbb.lock", f"{live.token}.lock"])
    finally:
        live.close()
