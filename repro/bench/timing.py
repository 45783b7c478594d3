"""Timing, peak memory and out-of-memory handling for the benchmark.

On CUDA the timed steps run in blocks of ``sync_every`` steps, each block between a pair
of CUDA events and followed by a synchronisation (the GPU's time, not the launch time); on
CPU with ``time.perf_counter``. With ``sync_every=1`` each step is timed alone, so the
host's kernel launches never overlap the GPU's work of the step before; with more, the
steps of a block run back to back, closer to how the training loop runs them (``repro/training``
synchronises once per ``train.log_every`` steps, 50 by default), and a sample is the block's
mean step time. Warm-up steps are run first and not timed. Peak memory is
``torch.cuda.max_memory_allocated`` after ``torch.cuda.reset_peak_memory_stats``,
so it counts what the measured steps themselves held (weights, optimiser state,
activations); on CPU it is not measured (``None`` with a reason).

``kernel_profile`` runs a few more steps under ``torch.profiler`` after the timed ones and reports
where the GPU's time went: the kernels' time a step (against the step's wall time, the share the
GPU was busy; the rest is the host's), kernel launches a step and the kernels that took most.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

GB = 1e9  # peak memory is reported in GB of 10^9 bytes, as LRA Table 2's "GB"


def time_ms(fn, warmup: int = 5, reps: int = 20) -> tuple[float, float]:
    """Median and spread (max-min) in ms of ``fn`` over ``reps`` timed calls, each synchronised alone (CUDA)."""
    times = StepTimer(torch.device("cuda")).run(fn, warmup, reps)
    return statistics.median(times), max(times) - min(times)


def matmul_peak_tflops(
    n: int = 8192, device: str | torch.device = "cuda", dtype: torch.dtype = torch.bfloat16
) -> float:
    """TFLOP/s of one ``n x n @ n x n`` matrix product: the roofline's ceiling on this device."""
    device = torch.device(device)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    warmup, reps = (3, 10) if device.type == "cuda" else (1, 3)
    ms = StepTimer(device).timing(lambda: a @ b, warmup, reps).median_ms
    return 2 * n**3 / (ms * 1e-3) / 1e12


@dataclass
class Timing:
    """Per-step times (ms) of one measurement and their summary."""

    times_ms: list[float]
    steps_per_sample: int = 1  # each entry the mean step time of a block of this many steps run back to back
    kernels: dict | None = None  # kernel_profile's summary of steps profiled after the timed ones

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def iqr_ms(self) -> float:
        if len(self.times_ms) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.times_ms, n=4, method="inclusive")
        return q3 - q1

    def summary(self) -> dict:
        """steps/s at the median step time, and at the slowest and fastest step (the spread)."""
        return {
            "steps_per_s": 1e3 / self.median_ms,
            "steps_per_s_min": 1e3 / max(self.times_ms),
            "steps_per_s_max": 1e3 / min(self.times_ms),
            "step_ms_median": self.median_ms,
            "step_ms_iqr": self.iqr_ms,
            "reps": len(self.times_ms) * self.steps_per_sample,  # timed steps
            "samples": len(self.times_ms),
            "sync_every": self.steps_per_sample,
            **(self.kernels or {}),
        }


class StepTimer:
    """Times calls of a step function on ``device`` (CUDA events, else wall clock)."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def one(self, step: Callable[[], object], calls: int = 1) -> float:
        """Milliseconds per call of ``calls`` calls of ``step`` run back to back, then synchronised."""
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                step()
            end.record()
            torch.cuda.synchronize(self.device)
            return start.elapsed_time(end) / calls
        begin = time.perf_counter()
        for _ in range(calls):
            step()
        return (time.perf_counter() - begin) * 1e3 / calls

    def timing(
        self,
        step: Callable[[], object],
        warmup: int,
        reps: int,
        max_seconds: float | None = None,
        sync_every: int = 1,
    ) -> Timing:
        """``warmup`` untimed calls, then up to ``reps`` timed ones in blocks of ``sync_every`` (fewer
        when ``reps`` is smaller: one block of them), one sample a block, its mean ms a step.

        ``max_seconds`` caps the timed part: the number of timed steps is cut so that
        their expected time (from the last warm-up step) stays under it, never below 3
        (or ``reps``, if smaller), so the whole matrix fits one GPU slot.
        """
        last_ms = None
        for _ in range(warmup):
            last_ms = self.one(step)
        self._sync()
        if max_seconds is not None and last_ms:
            reps = min(reps, max(min(3, reps), int(max_seconds * 1e3 / last_ms)))
        block = max(1, min(sync_every, reps))
        return Timing([self.one(step, block) for _ in range(reps // block)], block)

    def run(self, step: Callable[[], object], warmup: int, reps: int, max_seconds: float | None = None) -> list[float]:
        """The ms of each of up to ``reps`` timed calls, each synchronised alone (see ``timing``)."""
        return self.timing(step, warmup, reps, max_seconds).times_ms


TOP_KERNELS = 5  # kernels named per row, those with the most time


def kernel_profile(step: Callable[[], object], steps: int, device: torch.device) -> dict:
    """``steps`` more calls of ``step`` under ``torch.profiler``, then synchronised: ``kernel_summary``
    of them. Off CUDA nothing runs (no kernels to count) and ``top_kernels`` says so."""
    device = torch.device(device)
    if device.type != "cuda":
        return {**kernel_summary([], steps), "top_kernels": "not profiled: kernels are counted on CUDA only"}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize(device)
    return kernel_summary(prof.key_averages(), steps)


def kernel_summary(events, steps: int) -> dict:
    """Kernel ms and launches a step (the device's memory copies and fills included), the
    ``TOP_KERNELS`` kernels with most time, and the operators whose own kernels took most (``aten::copy_
    8.94 ms x190``: which calls launched them), from the profiler's averages ``events`` over ``steps``
    steps. The totals count the device's own entries only: an operator's entry repeats the time of the
    kernels it launched. No kernels (CPU): each value None."""
    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    if not kernels:
        return {key: None for key in SUMMARY_KEYS}
    operators = [e for e in events if e.device_type != DeviceType.CUDA and e.self_device_time_total > 0]
    host = [e for e in events if e.device_type != DeviceType.CUDA and e.self_cpu_time_total > 0]
    return {
        "kernel_ms_per_step": sum(e.self_device_time_total for e in kernels) / steps / 1e3,
        "kernels_per_step": sum(e.count for e in kernels) / steps,
        "top_kernels": _most_time(kernels, steps),
        "top_ops": _most_time(operators, steps),
        "host_ms_per_step": sum(e.self_cpu_time_total for e in host) / steps / 1e3,
        "top_host_ops": _most_time(host, steps, "self_cpu_time_total"),
    }


# kernel_summary's keys: the device's kernels, the operators that launched them, and the host's own time in
# operators (``host_ms_per_step``: the profiler's self CPU time of every operator entry, Python between them
# not counted), which tells a step that waits on its host where that host time goes
SUMMARY_KEYS = ("kernel_ms_per_step", "kernels_per_step", "top_kernels", "top_ops", "host_ms_per_step", "top_host_ops")


def _most_time(entries, steps: int, time_field: str = "self_device_time_total") -> str:
    """The ``TOP_KERNELS`` entries with most ``time_field`` (µs), as 'name ms-a-step xcalls-a-step; ...'."""
    top = sorted(entries, key=lambda e: getattr(e, time_field), reverse=True)[:TOP_KERNELS]
    return "; ".join(f"{e.key[:160]} {getattr(e, time_field) / steps / 1e3:.2f} ms x{e.count / steps:g}" for e in top)


def reset_peak(device: torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def read_peak(device: torch.device) -> tuple[int | None, str | None]:
    """(peak bytes allocated since the last reset, None), or (None, why it is not measured)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None, f"peak memory is measured on CUDA only (torch.cuda.max_memory_allocated); device was {device.type}"
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device)), None


def is_out_of_memory(err: BaseException) -> bool:
    """True for CUDA's (and the CPU allocator's) out-of-memory errors."""
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(err, oom_type):
        return True
    return isinstance(err, (RuntimeError, MemoryError)) and "out of memory" in str(err).lower()


def free_memory(device: torch.device) -> None:
    """Drop what the last measurement left behind, so the next row starts clean."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def device_name(device: torch.device) -> str:
    """The GPU's name as CUDA reports it, or ``cpu``."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
