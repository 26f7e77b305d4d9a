#!/usr/bin/env python3
"""A SLURM stand-in for tests: ``sbatch``, ``srun``, ``squeue``, ``sacct``, ``scancel`` and
``scontrol`` as one program (it acts as the name it is called by), running jobs as local processes.

``install(bin_dir, state_dir)`` makes the commands (links to this file) and returns the environment
that puts them on PATH. The jobs' state lives in ``$FAKESLURM_DIR/state.json`` (under a file lock);
a scheduler process (``fakeslurm.py daemon``, started by ``sbatch`` when none runs, gone when
nothing is left to run) starts a pending job when every ``afterok`` dependency has COMPLETED and a
slot is free (``$FAKESLURM_SLOTS``, default 1). What it honours, as SLURM does:

- ``--dependency=afterok:ID[:ID...]`` (an array job id means all its tasks): a dependency that
  ended in any other state leaves the job PENDING with reason ``DependencyNeverSatisfied``, or
  CANCELLED with ``--kill-on-invalid-dep=yes``;
- ``--array=0-N%P``: one job per task, ``ARRAY_TASK`` ids ``ID_N``, SLURM_ARRAY_* set;
- ``--time`` (minutes, ``$FAKESLURM_MINUTE_S`` seconds each, default 60) with ``--signal=SIG@S``:
  the job's steps (its ``srun`` tasks) get SIG S seconds before the limit, then SIGTERM and
  SIGKILL (``$FAKESLURM_KILL_WAIT``, default 5 s later): TIMEOUT;
- ``scancel ID`` (SIGTERM, then SIGKILL: CANCELLED), ``scancel --signal=SIG ID`` (to the steps);
- ``scontrol requeue ID``: the job, given KILL_WAIT to exit, goes back to PENDING and runs its
  batch script again (SLURM_RESTART_COUNT counts the restarts);
- ``sinfo -o "%P|%G|%l|%c|%m"``: the partitions of ``$FAKESLURM_PARTITIONS`` (default
  ``PARTITIONS``: ``gpu``, 8 GPUs a node, and ``cpu``, none), resources accepted by ``sbatch`` and
  not enforced;
- ``srun``: ``--ntasks-per-node`` x ``--nodes`` tasks of the command with SLURM_PROCID,
  SLURM_LOCALID, SLURM_NODEID (the job's nodes are names ``fake[0-N]``), ``--output``/``--error``
  patterns (%j %A %a %t) as srun expands them.

Not modelled: resources (asked for, never enforced), priorities, accounting beyond one line a job.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = ("sbatch", "srun", "squeue", "sacct", "scancel", "scontrol", "sinfo")
# sinfo's partitions: name (* the default) | GRES | time limit | CPUs | memory (MB) of a node
PARTITIONS = "gpu*|gpu:8|2-00:00:00|64|512000;cpu|(null)|infinite|64|256000"
ACTIVE = ("PENDING", "RUNNING")
KILLED_BY = {"TIMEOUT", "CANCELLED"}


def install(bin_dir: Path, state_dir: Path, **settings) -> dict:
    """Links named as the SLURM commands in ``bin_dir``; the environment that uses them."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    me = Path(__file__).resolve()
    me.chmod(0o755)
    for name in COMMANDS:
        link = bin_dir / name
        if not link.exists():
            link.symlink_to(me)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKESLURM_DIR": str(state_dir)}
    return {**env, **{f"FAKESLURM_{k.upper()}": str(v) for k, v in settings.items()}}


def shutdown(state_dir: Path) -> None:
    """Cancel every job and stop the scheduler (a test's teardown)."""
    os.environ["FAKESLURM_DIR"] = str(state_dir)
    with State() as s:
        ids = [j["id"] for j in s.jobs.values() if j["state"] in ACTIVE]
    if ids:
        scancel(ids)
    deadline = time.time() + 30
    while time.time() < deadline and _daemon_alive():
        time.sleep(0.1)
    pid = _daemon_pid()
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# ----------------------------------------------------------------------------- state


def _dir() -> Path:
    return Path(os.environ["FAKESLURM_DIR"])


class State:
    """``with State() as s:`` the jobs (id -> record), saved on exit, under an exclusive lock."""

    def __enter__(self):
        self._lock = open(_dir() / "state.lock", "a")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        path = _dir() / "state.json"
        data = json.loads(path.read_text()) if path.exists() else {"next": 1000, "jobs": {}}
        self.next, self.jobs = data["next"], data["jobs"]
        return self

    def __exit__(self, *exc):
        path = _dir() / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"next": self.next, "jobs": self.jobs}, indent=1))
        os.replace(tmp, path)
        self._lock.close()

    def select(self, ids: list[str]) -> list[dict]:
        """Jobs named by ``ids``: ``N`` (a job, or every task of array N) or ``N_T``."""
        out = []
        for i in ids:
            for part in str(i).split(","):
                out += [j for j in self.jobs.values() if part in (j["id"], j["array_id"])]
        return out


# ----------------------------------------------------------------------------- sbatch


def _minutes(text: str) -> float:
    """SLURM's --time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
        parts = [int(x) for x in text.split(":")] + [0, 0]
        return days * 1440 + parts[0] * 60 + parts[1] + parts[2] / 60
    parts = [int(x) for x in text.split(":")]
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        return parts[0] + parts[1] / 60
    return parts[0] * 60 + parts[1] + parts[2] / 60


SHORT = {"J": "job-name", "t": "time", "a": "array", "d": "dependency", "o": "output", "e": "error",
         "N": "nodes", "n": "ntasks", "D": "chdir"}  # fmt: skip


def _options(words: list[str]) -> tuple[dict, list[str]]:
    """(--long options as a dict, the rest) from sbatch/srun arguments."""
    opts, rest = {}, list(words)
    while rest and rest[0].startswith("-"):
        w = rest.pop(0)
        if w.startswith("--"):
            key, eq, value = w[2:].partition("=")
            if not eq:
                value = rest.pop(0) if key in FLAGS_WITH_VALUE else "yes"
        else:
            key = SHORT.get(w[1], w[1])
            value = w[2:] or rest.pop(0)
        opts[key] = value
    return opts, rest


FLAGS_WITH_VALUE = {"output", "error", "job-name", "time", "array", "dependency", "nodes", "ntasks",
                    "ntasks-per-node", "signal", "chdir", "kill-on-invalid-dep", "partition",
                    "cpus-per-task", "mem", "gpus-per-node", "account", "qos"}  # fmt: skip


def sbatch(args: list[str]) -> None:
    cli, rest = _options(args)
    script = Path(rest[0]).resolve()
    opts = {}
    for line in script.read_text().splitlines():
        if line.startswith("#SBATCH"):
            o, _ = _options(line.split()[1:])
            opts.update(o)
    opts.update(cli)
    deps = []
    for part in opts.get("dependency", "").split(","):
        kind, _, ids = part.partition(":")
        if kind and kind != "afterok":
            sys.exit(f"sbatch: fake SLURM supports afterok dependencies only, got {part}")
        deps += [i for i in ids.split(":") if i]
    signame, _, delay = opts.get("signal", "").partition("@")
    nodes = int(opts.get("nodes", 1))
    per_node = int(opts.get("ntasks-per-node", 0)) or max(1, int(opts.get("ntasks", 1)) // nodes)
    base = {
        "name": opts.get("job-name", script.name),
        "script": str(script),
        "cwd": opts.get("chdir", os.getcwd()),
        "env": dict(os.environ),
        "deps": deps,
        "kill_invalid": opts.get("kill-on-invalid-dep", "no") == "yes",
        "time_min": _minutes(opts["time"]) if "time" in opts else None,
        "signal": (signame.removeprefix("B:"), int(delay or 60)) if signame else None,
        "output": opts.get("output", "slurm-%j.out"),
        "error": opts.get("error"),
        "nodes": nodes,
        "tasks_per_node": per_node,
        "state": "PENDING",
        "reason": "None",
        "restarts": 0,
        "exit": None,
    }
    tasks = [None]
    if "array" in opts:
        spec, _, _ = opts["array"].partition("%")
        tasks = []
        for r in spec.split(","):
            lo, _, hi = r.partition("-")
            tasks += range(int(lo), int(hi or lo) + 1)
    with State() as s:
        job_id = s.next
        s.next += len(tasks) + 1
        for k, t in enumerate(tasks):
            key = str(job_id) if t is None else f"{job_id}_{t}"
            s.jobs[key] = {**base, "id": key, "raw": job_id + k, "array_id": None if t is None else str(job_id), "task": t}
    print(job_id if "parsable" in opts else f"Submitted batch job {job_id}", flush=True)
    _start_daemon()


# ----------------------------------------------------------------------------- the scheduler


def _daemon_pid() -> int | None:
    p = _dir() / "daemon.pid"
    return int(p.read_text()) if p.exists() and p.read_text().strip() else None


def _daemon_alive() -> bool:
    pid = _daemon_pid()
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _start_daemon() -> None:
    with open(_dir() / "daemon.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _daemon_alive():
            return
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "daemon"],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=open(_dir() / "daemon.log", "a"),
            stderr=subprocess.STDOUT,
        )
        (_dir() / "daemon.pid").write_text(str(proc.pid))


def _expand(pattern: str, job: dict, task: int | str = 0) -> str:
    array = job["array_id"] or job["id"]
    return (
        pattern.replace("%j", str(job["raw"]))
        .replace("%A", array)
        .replace("%a", str(job["task"] if job["task"] is not None else "4294967294"))
        .replace("%t", str(task))
        .replace("%x", job["name"])
    )


def _job_env(job: dict) -> dict:
    n = job["nodes"] * job["tasks_per_node"]
    env = {
        **job["env"],
        "SLURM_JOB_ID": str(job["raw"]),
        "SLURM_JOBID": str(job["raw"]),
        "SLURM_JOB_NAME": job["name"],
        "SLURM_NTASKS": str(n),
        "SLURM_NPROCS": str(n),
        "SLURM_NTASKS_PER_NODE": str(job["tasks_per_node"]),
        "SLURM_JOB_NUM_NODES": str(job["nodes"]),
        "SLURM_NNODES": str(job["nodes"]),
        "SLURM_JOB_NODELIST": f"fake[0-{job['nodes'] - 1}]" if job["nodes"] > 1 else "fake0",
        "SLURM_NODELIST": f"fake[0-{job['nodes'] - 1}]" if job["nodes"] > 1 else "fake0",
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_RESTART_COUNT": str(job["restarts"]),
        "SLURM_SUBMIT_DIR": job["cwd"],
    }
    if job["array_id"]:
        env |= {"SLURM_ARRAY_JOB_ID": job["array_id"], "SLURM_ARRAY_TASK_ID": str(job["task"])}
    return env


def _dep_state(s: State, dep: str) -> str:
    """COMPLETED (satisfied), WAIT, or NEVER (a dependency that ended otherwise)."""
    jobs = s.select([dep])
    if not jobs:
        return "NEVER"
    if all(j["state"] == "COMPLETED" for j in jobs):
        return "COMPLETED"
    if any(j["state"] not in ACTIVE and j["state"] != "COMPLETED" for j in jobs):
        return "NEVER"
    return "WAIT"


def _steps(job: dict) -> list[int]:
    """The pids of the job's srun tasks (written by srun), for signals that go to steps."""
    f = _dir() / "steps" / f"{job['raw']}.pids"
    return [int(x) for x in f.read_text().split()] if f.exists() else []


def _signal_steps(job: dict, sig: int) -> None:
    for pid in _steps(job):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _signal_all(job: dict, sig: int) -> None:
    if job.get("pid"):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job["pid"], sig)


def daemon() -> None:
    procs: dict[str, subprocess.Popen] = {}
    slots = int(os.environ.get("FAKESLURM_SLOTS", "1"))
    minute = float(os.environ.get("FAKESLURM_MINUTE_S", "60"))
    kill_wait = float(os.environ.get("FAKESLURM_KILL_WAIT", "5"))
    idle_since = None
    while True:
        now = time.time()
        with State() as s:
            for key, proc in list(procs.items()):  # ended processes
                job = s.jobs[key]
                if proc.poll() is None:
                    continue
                del procs[key]
                job["end"], job["exit"] = now, proc.returncode
                (_dir() / "steps" / f"{job['raw']}.pids").unlink(missing_ok=True)
                if job.pop("requeue", False):
                    job.pop("kill_at", None)
                    job.update(state="PENDING", reason="BeginTime", restarts=job["restarts"] + 1, pid=None)
                elif job["state"] == "RUNNING":
                    job["state"] = "COMPLETED" if proc.returncode == 0 else "FAILED"
            for key, job in s.jobs.items():  # signals, limits, kills
                if job["state"] != "RUNNING" and not job.get("kill_at"):
                    continue
                ran = now - job["start"]
                limit = job["time_min"] * minute if job["time_min"] else None
                if limit and job["signal"] and not job.get("warned") and ran >= limit - job["signal"][1]:
                    job["warned"] = True
                    _signal_steps(job, getattr(signal, "SIG" + job["signal"][0].removeprefix("SIG")))
                if limit and ran >= limit and job["state"] == "RUNNING":
                    job["state"], job["kill_at"] = "TIMEOUT", now + kill_wait
                    _signal_all(job, signal.SIGTERM)
                if job.get("kill_at") and now >= job["kill_at"]:  # the whole process group
                    _signal_all(job, signal.SIGKILL)
                    job.pop("kill_at")
            running = sum(j["state"] == "RUNNING" for j in s.jobs.values())
            for key, job in s.jobs.items():  # start what can start
                if job["state"] != "PENDING":
                    continue
                deps = [_dep_state(s, d) for d in job["deps"]]
                if "NEVER" in deps:
                    if job["kill_invalid"]:
                        job.update(state="CANCELLED", reason="DependencyNeverSatisfied", end=now)
                    else:
                        job["reason"] = "DependencyNeverSatisfied"
                    continue
                if "WAIT" in deps:
                    job["reason"] = "Dependency"
                    continue
                if running >= slots:
                    job["reason"] = "Resources"
                    continue
                running += 1
                out = Path(job["cwd"], _expand(job["output"], job))
                err = Path(job["cwd"], _expand(job["error"], job)) if job["error"] else out
                out.parent.mkdir(parents=True, exist_ok=True)
                err.parent.mkdir(parents=True, exist_ok=True)
                proc = subprocess.Popen(
                    ["bash", job["script"]],
                    cwd=job["cwd"],
                    env=_job_env(job),
                    stdin=subprocess.DEVNULL,
                    stdout=open(out, "a"),
                    stderr=open(err, "a"),
                    start_new_session=True,
                )
                procs[key] = proc
                job.update(state="RUNNING", reason="None", pid=proc.pid, start=now, warned=False)
                job.setdefault("first_start", now)
            waiting = [j for j in s.jobs.values() if j["state"] == "PENDING" and j["reason"] != "DependencyNeverSatisfied"]
        if procs or waiting:
            idle_since = None
        elif idle_since is None:
            idle_since = now
        elif now - idle_since > 2:
            (_dir() / "daemon.pid").write_text("")
            return
        time.sleep(0.1)


# ----------------------------------------------------------------------------- srun


def srun(args: list[str]) -> int:
    opts, command = _options(args)
    if "SLURM_JOB_ID" not in os.environ:
        sys.exit("srun: fake SLURM runs srun inside a job only")
    nodes = int(opts.get("nodes", os.environ.get("SLURM_JOB_NUM_NODES", 1)))
    per_node = int(opts.get("ntasks-per-node", 0)) or int(os.environ.get("SLURM_NTASKS_PER_NODE", 1))
    n = int(opts.get("ntasks", nodes * per_node))
    job = {
        "raw": os.environ["SLURM_JOB_ID"],
        "id": os.environ["SLURM_JOB_ID"],
        "array_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
        "task": os.environ.get("SLURM_ARRAY_TASK_ID"),
        "name": os.environ.get("SLURM_JOB_NAME", ""),
    }
    procs = []
    for rank in range(n):
        env = {
            **os.environ,
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank % per_node),
            "SLURM_NODEID": str(rank // per_node),
            "SLURM_NTASKS": str(n),
            "SLURM_STEP_NUM_TASKS": str(n),
            "SLURMD_NODENAME": f"fake{rank // per_node}",
        }
        out = open(_expand(opts["output"], job, rank), "a") if "output" in opts else None
        err = open(_expand(opts["error"], job, rank), "a") if "error" in opts else out
        procs.append(subprocess.Popen(command, env=env, stdout=out, stderr=err))
    steps = _dir() / "steps"
    steps.mkdir(exist_ok=True)
    (steps / f"{job['raw']}.pids").write_text(" ".join(str(p.pid) for p in procs))
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):  # they reach the tasks directly;
        signal.signal(sig, lambda signum, frame: None)  # srun waits for its tasks to end
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c != 0), 0)


# ----------------------------------------------------------------------------- queries, control


def _elapsed(job: dict) -> float:
    if not job.get("start"):
        return 0.0
    return (job.get("end") or time.time()) - job["start"] if job["state"] != "RUNNING" else time.time() - job["start"]


def _clock(seconds: float) -> str:
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def squeue(args: list[str]) -> None:
    """``squeue [-h] [-r] [-t all] [-j IDS] [-o FORMAT]``: %i id, %T state, %r reason, %M time used,
    %j name; ``-t all``: ended jobs too."""
    fmt, ids, header, states = "%.18i %.9j %.8T %.10M %r", None, True, ACTIVE
    it = iter(args)
    for a in it:
        if a in ("-h", "--noheader"):
            header = False
        elif a in ("-o", "--format"):
            fmt = next(it)
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        elif a in ("-t", "--states"):
            states = None if next(it).lower() == "all" else ACTIVE
        elif a in ("-j", "--jobs"):
            ids = next(it).split(",")
        elif a.startswith("--jobs="):
            ids = a.split("=", 1)[1].split(",")
    with State() as s:
        jobs = s.select(ids) if ids else list(s.jobs.values())
    fields = {"i": lambda j: j["id"], "T": lambda j: j["state"], "r": lambda j: j["reason"],
              "M": lambda j: _clock(_elapsed(j)), "j": lambda j: j["name"]}  # fmt: skip

    def line(j: dict | None) -> str:
        names = {"i": "JOBID", "T": "STATE", "r": "REASON", "M": "TIME", "j": "NAME"}
        return re.sub(r"%\.?\d*([a-zA-Z])", lambda m: names[m[1]] if j is None else str(fields[m[1]](j)), fmt)

    if header:
        print(line(None))
    for j in jobs:
        if states is None or j["state"] in states:
            print(line(j))


def sacct(args: list[str]) -> None:
    """``sacct -j ID [-j ID...] -o FIELDS --parsable2 [-n] [-X]``: JobID, State, NodeList, Elapsed,
    ElapsedRaw, ExitCode, Start, End."""
    fields, ids, header = ["JobID", "State", "ExitCode"], [], True
    it = iter(args)
    for a in it:
        if a in ("-o", "--format"):
            fields = next(it).split(",")
        elif a.startswith("--format="):
            fields = a.split("=", 1)[1].split(",")
        elif a in ("-j", "--jobs"):
            ids += next(it).split(",")
        elif a.startswith("--jobs="):
            ids += a.split("=", 1)[1].split(",")
        elif a in ("-n", "--noheader"):
            header = False
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else "Unknown"  # noqa: E731
    value = {
        "JobID": lambda j: j["id"],
        "State": lambda j: j["state"],
        "NodeList": lambda j: "fake0" if j.get("start") else "None assigned",
        "Elapsed": lambda j: _clock(_elapsed(j)),
        "ElapsedRaw": lambda j: str(int(_elapsed(j))),
        "ExitCode": lambda j: f"{j['exit'] if j['exit'] is not None and j['exit'] >= 0 else 0}:{-j['exit'] if j['exit'] is not None and j['exit'] < 0 else 0}",
        "Start": lambda j: stamp(j.get("start")),
        "End": lambda j: stamp(j.get("end")) if j["state"] not in ACTIVE else "Unknown",
    }
    with State() as s:
        jobs = s.select(ids) if ids else list(s.jobs.values())
    if header:
        print("|".join(fields))
    for j in jobs:
        print("|".join(value[f](j) for f in fields))


def scancel(args: list[str]) -> None:
    sig, ids = None, []
    it = iter(args)
    for a in it:
        if a in ("-s", "--signal"):
            sig = next(it)
        elif a.startswith("--signal="):
            sig = a.split("=", 1)[1]
        elif not a.startswith("-"):
            ids.append(a)
    kill_wait = float(os.environ.get("FAKESLURM_KILL_WAIT", "5"))
    with State() as s:
        for job in s.select(ids):
            if sig:
                if job["state"] == "RUNNING":
                    _signal_steps(job, getattr(signal, "SIG" + sig.removeprefix("SIG")))
            elif job["state"] == "PENDING":
                job.update(state="CANCELLED", end=time.time())
            elif job["state"] == "RUNNING":
                job.update(state="CANCELLED", kill_at=time.time() + kill_wait)
                _signal_all(job, signal.SIGTERM)


def scontrol(args: list[str]) -> None:
    if args[:1] == ["requeue"]:
        kill_wait = float(os.environ.get("FAKESLURM_KILL_WAIT", "5"))
        with State() as s:
            for job in s.select(args[1].split(",")):
                if job["state"] == "RUNNING":
                    job.update(requeue=True, kill_at=time.time() + kill_wait)
                elif job["state"] not in ACTIVE:
                    job.update(state="PENDING", reason="BeginTime", restarts=job["restarts"] + 1)
        _start_daemon()
    elif args[:2] == ["show", "job"]:
        with State() as s:
            for j in s.select([args[2]]):
                print(f"JobId={j['raw']} ArrayJobId={j['array_id']} JobName={j['name']} JobState={j['state']} "
                      f"Reason={j['reason']} Restarts={j['restarts']} NumNodes={j['nodes']}")  # fmt: skip
    elif args[:2] == ["show", "hostnames"]:
        m = re.fullmatch(r"(\w+?)\[(\d+)-(\d+)\]", args[2])
        names = [f"{m[1]}{i}" for i in range(int(m[2]), int(m[3]) + 1)] if m else args[2].split(",")
        print("\n".join(names))
    else:
        sys.exit(f"scontrol: fake SLURM does not know {' '.join(args)}")


def sinfo(args: list[str]) -> None:
    fmt = args[args.index("-o") + 1] if "-o" in args else ""
    if fmt != "%P|%G|%l|%c|%m":
        sys.exit(f"sinfo: fake SLURM prints only -o '%P|%G|%l|%c|%m', not {fmt!r}")
    print("\n".join(os.environ.get("FAKESLURM_PARTITIONS", PARTITIONS).split(";")))


def main() -> int:
    name = Path(sys.argv[0]).name
    if name == "fakeslurm.py" and sys.argv[1:2] == ["daemon"]:
        daemon()
        return 0
    commands = {"sbatch": sbatch, "srun": srun, "squeue": squeue, "sacct": sacct, "scancel": scancel, "scontrol": scontrol,
                "sinfo": sinfo}  # fmt: skip
    return commands[name](sys.argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
