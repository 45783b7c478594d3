"""A run's console: what it prints goes to the terminal and to ``log.txt`` in its run folder, and a
closed stdout or stderr stops it as SIGINT would.

Within :func:`run_console`, ``sys.stdout`` and ``sys.stderr`` are wrapped: each complete line either
stream prints is appended to the log (one write, flushed, so a crash cuts at most the line being
written), and the terminal gets every line flushed as it ends, so a pipe (``| tee``) sees lines as
they come. A progress bar redraws its line after ``\\r``: the log keeps the last drawing when the
line ends (a bar that clears itself when done, or one drawn below another, leaves nothing). Each
opening writes one header line (``# <UTC time>: <command line>``); a resumed run appends to its
log, a run started over begins a new one. The log is for people: no tool reads it, and a record is complete only once
``metrics.json`` is written (ARCHITECTURE.md, "record").

A stream whose reader went away (``lra-run ... | head -1``; Ctrl-C on ``... | tee log`` ends ``tee``
too) raises BrokenPipeError on the next write. The stream is then pointed at ``/dev/null`` (its
lines still reach the log) and the process raises SIGPIPE to itself: while training, where
signals.StopSignals catches it, the run checkpoints and exits with 128 + SIGPIPE = 141, as for
SIGINT; outside training Python ignores SIGPIPE and the run goes on, printing to its log.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

LOG_FILE = "log.txt"


class _Log:
    """The log file: whole lines, each written and flushed at once."""

    def __init__(self, handle: TextIO):
        self.handle = handle

    def line(self, text: str) -> None:
        self.handle.write(text + "\n")
        self.handle.flush()


class _Tee:
    """A text stream that writes to ``stream`` and, a line at a time, to the log (module docstring)."""

    def __init__(self, stream: TextIO, log: _Log):
        self.stream, self.log = stream, log
        self.pending = ""  # the log's unfinished line: the text after its last \r
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self.stream.write(text)
                if "\n" in text:
                    self.stream.flush()
            except BrokenPipeError:
                self._reader_gone()
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self._log_line(line)
        self.pending = self.pending.rsplit("\r", 1)[-1]
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def _log_line(self, line: str) -> None:
        shown = line.rsplit("\r", 1)[-1].rstrip()  # what a terminal shows of a redrawn line
        if shown and "\x1b" not in shown:  # a nested bar's frame moves the cursor: a terminal's, not the log's
            self.log.line(shown)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def close_line(self) -> None:
        """Log an unfinished line (the caller is leaving)."""
        self._log_line(self.pending)
        self.pending = ""

    def _reader_gone(self) -> None:
        self.broken = True
        try:  # later writes, and Python's own flush at exit, then go nowhere instead of failing
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
        name = "stdout" if self.stream is sys.__stdout__ else "stderr" if self.stream is sys.__stderr__ else "a stream"
        self.log.line(f"{name} was closed by its reader (broken pipe): its lines go to this log only")
        if hasattr(signal, "SIGPIPE"):
            signal.raise_signal(signal.SIGPIPE)  # ignored outside training, a stop during it (module docstring)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)  # fileno, isatty, encoding: the terminal's


@contextmanager
def run_console(path: Path | None, fresh: bool) -> Iterator[None]:
    """Within the block, lines printed also go to the log ``path`` (None: no log, streams untouched);
    ``fresh``: start a new log instead of appending (a run started over)."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w" if fresh else "a", encoding="utf-8") as handle:
        log = _Log(handle)
        when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        log.line(f"# {when}: {' '.join([Path(sys.executable).name, *sys.argv])}")
        out, err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = tees = _Tee(out, log), _Tee(err, log)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = out, err
            for tee in tees:
                tee.close_line()
