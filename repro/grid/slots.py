"""Which jobs run on which GPU, how many one GPU may hold, and the GPU time each job is charged.

Packing (the fast-arms issue, "Packing"): a GPU holds at most ``min(per_gpu)`` of the jobs on it,
counting the one to be placed, so a job whose block says ``per_gpu: 1`` runs alone. A new job
goes to the GPU with the fewest jobs (then the first listed). While ``k`` jobs share a GPU, each
is charged ``1/k`` of the elapsed time: the charges of one GPU add up to the time it was busy.
"""

from __future__ import annotations


class GpuSlots:
    """Occupancy and time accounting of a list of GPUs (``None``: this process's own device)."""

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

    def place(self, per_gpu: int):
        """The GPU a job with this packing limit goes to now, or ``False`` when every GPU is full for it."""
        open_gpus = [gpu for gpu in self.gpus if len(self.members[gpu]) < min([per_gpu, *self.members[gpu].values()])]
        if not open_gpus:
            return False
        return min(open_gpus, key=lambda gpu: (len(self.members[gpu]), self.gpus.index(gpu)))

    def add(self, gpu, key: str, per_gpu: int, now: float) -> None:
        if key in self.charged_s:
            raise ValueError(f"job {key} is already running")
        self.advance(now)
        self.members[gpu][key] = per_gpu
        self.charged_s[key] = 0.0

    def remove(self, gpu, key: str, now: float) -> float:
        """Take a job off its GPU; returns the GPU seconds it was charged."""
        self.advance(now)
        del self.members[gpu][key]
        return self.charged_s.pop(key)

    def running(self, gpu) -> int:
        return len(self.members[gpu])
