"""Run commands N to a GPU, in order, before a deadline; pass stop signals on so each run checkpoints.

Each job is a subprocess that leads its own process group (``os.setsid``: a Ctrl-C in the terminal
reaches the scheduler alone, which decides what each job is sent),
with ``CUDA_VISIBLE_DEVICES`` set to its GPU (its GPUs, comma-separated, for a data-parallel job of
``Job.gpus`` > 1). Jobs start in the given order whenever a GPU can take one (``GpuSlots``: packing
limits and GPU-time accounting); a job whose packing limit keeps it off every GPU for now waits, and
the next job that fits starts meanwhile; but while a data-parallel job waits for enough idle GPUs,
a job queued after it starts only if its expected seconds end before those GPUs are expected to be
free (backfilling; by the running jobs' ``est_s``), so that jobs of one GPU cannot keep it waiting
to the end. A job whose expected seconds
(``Job.est_s``) would end past the deadline is not started (``carry_over``: started anyway
while at least ``CARRY_OVER_MIN_S`` are left, to be checkpointed and continued later); a running
job that may not carry over and whose own progress (``projected_end``) says it will end past the
deadline is stopped then, not at the deadline, and its GPU goes to the next job that fits. At
the deadline, or on SIGTERM / SIGINT / SIGUSR1 to this process, the running jobs get that
signal (SIGTERM at the deadline: the runner checkpoints and exits 143), ``grace_s`` to end,
then SIGKILL to the job's process group. torchrun starts each rank with ``setsid``, out of that
group's reach: it forwards the stop signal to them and kills them itself after its shutdown timeout,
set ``TORCHRUN_MARGIN_S`` below ``grace_s`` (torch >= 2.12; older torchrun waits 30 s).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
CARRY_OVER_MIN_S = 300.0  # a run started to be carried over gets at least this much of the slot
PROJECTION_CHECK_S = 5.0  # how often a running job that may not carry over is projected against the deadline
TORCHRUN_MARGIN_S = 15  # torchrun kills its ranks this long before the scheduler's grace ends (it cannot reach them)
PROJECTION_TAIL_S = 30.0  # what a run does after its last step (test pass, record), added to its projection


class GpuSlots:
    """Occupancy and time accounting of a list of GPUs (``None``: this process's own device): which jobs run on
    which GPU, how many one GPU may hold, and the GPU time each job is charged.

    Packing: a GPU holds at most ``min(per_gpu)`` of the jobs on it,
    counting the one to be placed, so a job whose block says ``per_gpu: 1`` runs alone. A new job
    goes to the GPU with the fewest jobs (then the first listed); a data-parallel job of ``gpus`` > 1
    takes that many idle GPUs (the first listed) and holds them alone. A placement is the tuple of
    the job's GPUs. While ``k`` jobs share a GPU, each is charged ``1/k`` of the elapsed time on it:
    the charges of one GPU add up to the time it was busy, and a job on n GPUs is charged n times.
    """

    def __init__(self, gpus: list[str | None]):
        if not gpus:
            raise ValueError("GpuSlots needs at least one GPU (None: this process's device)")
        self.gpus = list(gpus)
        self.members: dict = {gpu: {} for gpu in self.gpus}  # gpu -> {job key: its per_gpu}
        self.busy_s: dict = {gpu: 0.0 for gpu in self.gpus}
        self.charged_s: dict[str, float] = {}
        self._last: float | None = None

    def advance(self, now: float) -> None:
        """Charge the time since the last event to the jobs running in it."""
        if self._last is not None and now > self._last:
            elapsed = now - self._last
            for gpu, members in self.members.items():
                if members:
                    self.busy_s[gpu] += elapsed
                    for key in members:
                        self.charged_s[key] += elapsed / len(members)
        self._last = now if self._last is None else max(self._last, now)

    def place(self, per_gpu: int, gpus: int = 1) -> tuple | bool:
        """The GPUs (a tuple of ``gpus``) a job with this packing limit goes to now, or ``False`` when too
        few can take it."""
        if gpus > 1:
            idle = [gpu for gpu in self.gpus if not self.members[gpu]]
            return tuple(idle[:gpus]) if len(idle) >= gpus else False
        open_gpus = [gpu for gpu in self.gpus if len(self.members[gpu]) < min([per_gpu, *self.members[gpu].values()])]
        if not open_gpus:
            return False
        return (min(open_gpus, key=lambda gpu: (len(self.members[gpu]), self.gpus.index(gpu))),)

    def add(self, placement: tuple, key: str, per_gpu: int, now: float) -> None:
        if key in self.charged_s:
            raise ValueError(f"job {key} is already running")
        self.advance(now)
        for gpu in placement:
            self.members[gpu][key] = per_gpu if len(placement) == 1 else 1
        self.charged_s[key] = 0.0

    def remove(self, placement: tuple, key: str, now: float) -> float:
        """Take a job off its GPUs; returns the GPU seconds it was charged."""
        self.advance(now)
        for gpu in placement:
            del self.members[gpu][key]
        return self.charged_s.pop(key)

    def running(self, gpu) -> int:
        return len(self.members[gpu])


def named_gpus(gpus: list) -> int:
    """How many GPUs a GPU list names (``[None]``: this process's device, none named)."""
    return sum(1 for gpu in gpus if gpu is not None)


def gpu_label(placement: tuple) -> str | None:
    """How logs name a placement: None (this process's device), ``"2"``, or ``"0+1"`` for a data-parallel job."""
    return None if placement == (None,) else "+".join(str(gpu) for gpu in placement)


def own_group_dying_with_driver() -> None:
    """In a job's process before it starts: lead a process group of its own (so a stop reaches its ranks too)
    and, on Linux, get SIGTERM when the driver dies, however it dies (``prctl(PR_SET_PDEATHSIG)``), so a
    killed driver leaves no cell training on: the next driver would start that cell again on the same folder.
    The job checkpoints on SIGTERM, as on any stop."""
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        parent = os.getppid()
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        if os.getppid() != parent:  # the driver died before the call took effect
            os.kill(os.getpid(), signal.SIGTERM)


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Job:
    """One command to run. ``est_s``: expected wall seconds on a shared GPU (None: unknown, always started);
    ``carry_over``: whether it may start without time to end (None: the scheduler's setting); ``gpus``: the
    idle GPUs a data-parallel command needs at once."""

    key: str
    label: str
    command: list[str]
    per_gpu: int = 1
    est_s: float | None = None
    log_path: Path | None = None  # None: this process's own output
    carry_over: bool | None = None
    gpus: int = 1

    def may_carry_over(self, default: bool) -> bool:
        """Its own ``carry_over`` when set, else ``default`` (the scheduler's ``--carry-over``)."""
        return default if self.carry_over is None else self.carry_over


@dataclass
class Ended:
    job: Job
    gpu: str | None  # gpu_label of its placement
    returncode: int
    wall_s: float
    gpu_s: float  # the GPU time charged to it (GpuSlots)
    started_utc: str
    finished_utc: str
    stopped: bool  # stopped by the scheduler (deadline or a signal to it)


@dataclass
class Outcome:
    ended: list[Ended] = field(default_factory=list)
    not_started: list[Job] = field(default_factory=list)  # would have ended past the deadline
    left_queued: list[Job] = field(default_factory=list)  # still queued when a signal or the deadline came
    stopped_early: list[Job] = field(default_factory=list)  # projected past the deadline, unable to carry over
    signum: int | None = None
    deadline_hit: bool = False
    busy_s: dict = field(default_factory=dict)  # GPU -> seconds with at least one job on it


@dataclass
class _Running:
    job: Job
    placement: tuple
    process: subprocess.Popen
    began: float
    started_utc: str
    handle: object


class Scheduler:
    """Runs jobs on ``gpus`` (ids for ``CUDA_VISIBLE_DEVICES``; ``[None]``: this process's device)."""

    def __init__(
        self,
        gpus: list[str | None],
        deadline: float | None = None,
        grace_s: float = 120.0,
        carry_over: bool = False,
        on_start: Callable[[Job], bool] | None = None,
        on_end: Callable[[Ended], None] | None = None,
        poll_s: float = 0.5,
        clock=time.monotonic,
        projected_end: Callable[[Job, float], float | None] | None = None,
    ):
        """``projected_end(job, now)``: the clock time at which a running job will take its last step, by its
        progress so far (None: not known yet); called every ``PROJECTION_CHECK_S`` from the job's start."""
        self.slots = GpuSlots(gpus)
        self.deadline, self.grace_s, self.carry_over = deadline, grace_s, carry_over
        self.on_start, self.on_end, self.poll_s, self.clock = on_start, on_end, poll_s, clock
        self.projected_end = projected_end
        self.start = clock()
        self.running: dict[str, _Running] = {}
        self.outcome = Outcome()
        self._stopping: set[str] = set()
        self._checked = self.start

    def _handle(self, signum, _frame) -> None:
        if self.outcome.signum is None:
            self.outcome.signum = signum

    def run(self, jobs: list[Job]) -> Outcome:
        """Run ``jobs``; returns when all ended, or after the deadline or a stop signal stopped the rest."""
        too_wide = [job.label for job in jobs if job.gpus > 1 and job.gpus > named_gpus(self.slots.gpus)]
        if too_wide:
            raise ValueError(f"{too_wide[0]} needs more GPUs than this scheduler has ({self.slots.gpus})")
        previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        queue = list(jobs)
        try:
            while (queue or self.running) and self.outcome.signum is None:
                now = self.clock()
                if self.deadline is not None and now >= self.deadline:
                    self.outcome.deadline_hit = True
                    break
                queue = self._drop_unfinishable(queue, now)
                if queue and self._launch_next(queue, now):
                    continue
                self._reap()
                self._stop_overruns(now)
                if self.running:
                    time.sleep(self.poll_s)
        finally:
            self._stop_all(self.outcome.signum or signal.SIGTERM)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.outcome.left_queued = queue
        self.outcome.busy_s = dict(self.slots.busy_s)
        return self.outcome

    def _fits(self, job: Job, now: float) -> bool:
        if self.deadline is None or job.est_s is None:
            return True
        left = self.deadline - now
        return job.est_s <= left or (job.may_carry_over(self.carry_over) and left >= CARRY_OVER_MIN_S)

    def _stop_overruns(self, now: float) -> None:
        """SIGTERM (it checkpoints) to each running job that may not carry over and is projected to end
        past the deadline: its work would be lost at the deadline anyway, and its GPU can take a job that fits."""
        if self.deadline is None or self.projected_end is None or now - self._checked < PROJECTION_CHECK_S:
            return
        self._checked = now
        for key, entry in self.running.items():
            if key in self._stopping or entry.job.may_carry_over(self.carry_over):
                continue
            end = self.projected_end(entry.job, now)
            if end is not None and end + PROJECTION_TAIL_S > self.deadline:
                late = (end - self.deadline) / 60
                print(
                    f"[grid] stopping {entry.job.label}: projected to end {late:.1f} min after the deadline, and it "
                    "cannot carry over",
                    flush=True,
                )
                entry.process.send_signal(signal.SIGTERM)
                self._stopping.add(key)
                self.outcome.stopped_early.append(entry.job)

    def _drop_unfinishable(self, queue: list[Job], now: float) -> list[Job]:
        """Jobs that would end past the deadline leave the queue for good (time only runs out)."""
        kept = []
        for job in queue:
            (kept if self._fits(job, now) else self.outcome.not_started).append(job)
        return kept

    def _launch_next(self, queue: list[Job], now: float) -> bool:
        """Start the first queued job some GPU can take; False when none can start now. Behind a data-parallel
        job that cannot start yet, only jobs that end before its GPUs are expected free (module docstring)."""
        reserved_at = None
        for i, job in enumerate(queue):
            placement = self.slots.place(job.per_gpu, job.gpus)
            if placement is False:
                if job.gpus > 1 and reserved_at is None:
                    reserved_at = self._free_at(job.gpus, now)
                continue
            if reserved_at is not None and (job.est_s is None or now + job.est_s > reserved_at):
                continue
            queue.pop(i)
            if self.on_start is None or self.on_start(job):
                self._spawn(job, placement, now)
            return True
        return False

    def _free_at(self, count: int, now: float) -> float:
        """When ``count`` GPUs are expected idle: each GPU at the latest expected end of its running jobs
        (``began + est_s``, at least now; never, for a job without an estimate)."""
        free = []
        for gpu in self.slots.gpus:
            ends = [
                math.inf if r.job.est_s is None else max(now, r.began + r.job.est_s)
                for r in self.running.values()
                if gpu in r.placement
            ]
            free.append(max(ends, default=now))
        return sorted(free)[count - 1]

    def _spawn(self, job: Job, placement: tuple, now: float) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        label = gpu_label(placement)
        if label is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in placement)
        if job.gpus > 1:
            # torchrun (torch >= 2.12; before, 30 s) waits this long for its stopped ranks, then kills them
            env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(max(1, int(self.grace_s) - TORCHRUN_MARGIN_S))
        handle = None
        if job.log_path is not None:
            job.log_path.parent.mkdir(parents=True, exist_ok=True)
            handle = job.log_path.open("a")
        try:
            process = subprocess.Popen(
                job.command,
                env=env,
                stdout=handle,
                preexec_fn=own_group_dying_with_driver,  # noqa: PLW1509
                stderr=subprocess.STDOUT if handle else None,
            )
        except BaseException:
            if handle is not None:
                handle.close()
            raise
        where = f" on GPU {label}" if label is not None else ""
        print(f"[grid] start {job.label}{where} at {(now - self.start) / 60:.1f} min", flush=True)
        self.slots.add(placement, job.key, job.per_gpu, now)
        self.running[job.key] = _Running(job, placement, process, now, utc_now(), handle)

    def _reap(self) -> None:
        for key in [k for k, r in self.running.items() if r.process.poll() is not None]:
            self._end(key, stopped=key in self._stopping)

    def _end(self, key: str, stopped: bool) -> None:
        entry = self.running.pop(key)
        if entry.handle is not None:
            entry.handle.close()
        now = self.clock()
        gpu_s = self.slots.remove(entry.placement, key, now)
        label = gpu_label(entry.placement)
        ended = Ended(
            entry.job,
            label,
            entry.process.returncode,
            now - entry.began,
            gpu_s,
            entry.started_utc,
            utc_now(),
            stopped,
        )
        self.outcome.ended.append(ended)
        where = f" on GPU {label}" if label is not None else ""
        print(
            f"[grid] done{where}: {entry.job.label}, exit {ended.returncode}, {ended.wall_s / 60:.1f} min", flush=True
        )
        if self.on_end is not None:
            self.on_end(ended)

    def _stop_all(self, signum: int) -> None:
        """Send ``signum`` to every running job, give them ``grace_s`` to end, then kill the rest."""
        self._reap()  # those that ended on their own first
        if not self.running:
            return
        print(f"[grid] signal {signum}: stopping {len(self.running)} running job(s)", flush=True)
        for key, entry in self.running.items():
            if entry.process.poll() is None and key not in self._stopping:  # those are checkpointing already
                entry.process.send_signal(signum)
        until = time.monotonic() + self.grace_s
        while any(r.process.poll() is None for r in self.running.values()) and time.monotonic() < until:
            time.sleep(0.2)
        for entry in self.running.values():
            if entry.process.poll() is None:
                print(f"[grid] {entry.job.label} did not end within {self.grace_s:.0f} s; killing it", flush=True)
                try:
                    os.killpg(entry.process.pid, signal.SIGKILL)  # the job leads its group (setsid): its ranks too
                except ProcessLookupError:
                    pass
                entry.process.wait()
        for key in list(self.running):
            self._end(key, stopped=True)
