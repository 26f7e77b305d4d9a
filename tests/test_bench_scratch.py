"""A benchmark's temporary work folder (bench/scratch.py) does not outlive it: removed at its end, on
an error or Ctrl-C, and on SIGTERM (``timeout``, ``kill``) with the child it was timing stopped; a
``--workdir`` is kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from convexp.bench.scratch import work_folder


def test_the_temporary_folder_goes_at_the_end_and_on_an_interrupt(tmp_path):
    with work_folder(None, "convexp-test-") as work:
        (work / "model").mkdir()
        (work / "model" / "weights").write_bytes(b"x" * 1000)
    assert not work.exists()
    with pytest.raises(KeyboardInterrupt), work_folder(None, "convexp-test-") as work:
        (work / "data").write_text("rows")
        raise KeyboardInterrupt
    assert not work.exists()
    with work_folder(str(tmp_path / "mine"), "convexp-test-") as work:  # --workdir: the user's, kept
        (work / "data").write_text("rows")
    assert (tmp_path / "mine" / "data").is_file()


def test_sigterm_removes_the_folder_and_stops_the_timed_child(tmp_path):
    """As `timeout` ends `convexp bench squad`: SIGTERM while jobs.timed waits for a child."""
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    bench = textwrap.dedent(f"""
        import os, sys
        from convexp.bench.jobs import timed
        from convexp.bench.scratch import work_folder

        with work_folder(None, "convexp-test-") as work:
            (work / "model.safetensors").write_bytes(b"x" * 100_000)
            print(work, flush=True)
            timed([sys.executable, "-c", {child!r}], dict(os.environ), work / "child")
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", bench], stdout=subprocess.PIPE, text=True, env=env)
    try:
        work = Path(proc.stdout.readline().strip())
        deadline = time.monotonic() + 20
        while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert work.is_dir() and pid_file.read_text(), "the bench did not start its child"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert not work.exists()  # the folder, the model written into it, the child's logs
    child_pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child_pid, 0)  # the child was stopped and reaped, not left running


def test_sigterm_stops_a_pool_of_jobs_and_starts_no_more(tmp_path):
    """bench sweep's run_pool: the running jobs are stopped, the waiting ones never start."""
    started = tmp_path / "started"
    started.mkdir()
    child = f"import os, time; open(os.path.join({str(started)!r}, str(os.getpid())), 'w').close(); time.sleep(60)"
    bench = textwrap.dedent(f"""
        import io, os, sys
        from rich.console import Console
        from convexp.bench.scratch import work_folder
        from convexp.bench.sweep import run_pool

        with work_folder(None, "convexp-test-") as work:
            print(work, flush=True)
            cmds = [[sys.executable, "-c", {child!r}]] * 4
            run_pool(cmds, 2, [dict(os.environ)] * 4, [work / f"job{{i}}" for i in range(4)],
                     Console(file=io.StringIO()), "packed")
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", bench], stdout=subprocess.PIPE, text=True, env=env)
    try:
        work = Path(proc.stdout.readline().strip())
        deadline = time.monotonic() + 20
        while len(list(started.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    time.sleep(0.5)
    pids = [int(p.name) for p in started.iterdir()]
    assert len(pids) == 2 and not work.exists()  # two ran, two never started
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
