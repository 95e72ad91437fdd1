"""Stop requests (SIGINT / SIGTERM) of the `robot-rl` command, kept so that none is lost. Imports nothing heavy.

Python's own SIGINT handling raises KeyboardInterrupt wherever the main thread happens to be, and some places eat
it: a gc callback (JAX's ``_xla_gc_callback``), a ctypes callback or a ``__del__`` report it as "Exception ignored"
and carry on; a ctypes argument conversion turns it into ``ctypes.ArgumentError``. A stopped command then ran to the
end and exited 0, or died with an unrelated traceback. While :func:`handling` is active:

- the first SIGINT / SIGTERM is *recorded* (:func:`requested`) before anything else happens, then raised as
  KeyboardInterrupt / :class:`Terminated`, except inside :func:`deferred` (a job's loop checks the record between
  steps, so nothing is left half-written); a further one only counts as recorded (it must not break the clean-up
  under way);
- an interrupt eaten as "Exception ignored" prints nothing and is raised again a few milliseconds later (SIGALRM,
  armed only then), until it lands where it can propagate; one that would land inside an import waits (5 ms at a
  time) until the import is done: an extension module interrupted while it initialises can crash the process
  (jaxlib: a segmentation fault);
- whatever exception a stopped command ends with (a converted interrupt included), the command's entry point ends it
  as stopped: one line (``interrupted`` / ``terminated``) and exit status 130 / 143 (:func:`exit_status`).

:func:`note` lets another handler (a node's stop flag, the launcher's) record a stop request it handles itself.
:func:`install_stop_signals` is that handler for a :class:`StopFlag` a loop polls (ROS nodes; training outside the
command's handling).
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)
REDELIVER_AFTER_S = 0.005


class Terminated(KeyboardInterrupt):
    """SIGTERM raised as an interrupt, so a job cleans up as on Ctrl-C (no staging folder or partial file left)."""


_signum: int | None = None  # the first stop request's signal number
_depth = 0  # nesting of `handling`
_deferred = 0  # nesting of `deferred`
_previous: dict[int, object] = {}
_main_ident = threading.main_thread().ident
_previous_hook = None
_reported = False
_record_only = False
_process_handling: bool | None = None  # install_for_process was called


def requested() -> int | None:
    """The signal number of the first stop request while :func:`handling` was active (or noted), else None."""
    return _signum


def exit_status(signum: int | None = None) -> int:
    """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + (signum if signum is not None else _signum or signal.SIGINT)


def interrupt_for(signum: int | None = None) -> KeyboardInterrupt:
    """The exception a stop request raises: Terminated for SIGTERM, else KeyboardInterrupt."""
    signum = signum if signum is not None else _signum
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def message(signum: int | None = None) -> str:
    """The one line a stopped command prints: `terminated` (SIGTERM) or `interrupted`."""
    signum = signum if signum is not None else _signum
    return "terminated" if signum == signal.SIGTERM else "interrupted"


def note(signum: int) -> None:
    """Record a stop request that another handler (a node's stop flag, the launcher) deals with itself."""
    global _signum
    if _signum is None:
        _signum = signum


def check() -> None:
    """Raise the stop request's interrupt if there was one (outside :func:`deferred`: a safe point in a loop)."""
    if _signum is not None:
        _cancel_redelivery()
        raise interrupt_for()


def report_once() -> bool:
    """Whether the `interrupted` / `terminated` line is still to be printed (True once, then False)."""
    global _reported
    first, _reported = not _reported, True
    return first


def first_missing(path) -> Path | None:
    """The outermost of `path` and its parents that does not exist: what `mkdir(parents=True)` creates, and what
    to remove so that a stopped job leaves nothing behind. None if `path` exists."""
    path = Path(path).absolute()
    missing = None
    while not path.exists():
        missing, path = path, path.parent
    return missing


def _handle(signum: int, frame) -> None:
    repeated = _signum is not None
    note(signum)
    if _deferred or repeated:  # a second Ctrl-C must not break the clean-up the first one started
        return
    _raise_when_safe(frame)


def _raise_when_safe(frame) -> None:
    """Raise the stop request's interrupt, unless the main thread is inside the unraisable hook (Python would print
    it with a traceback) or an import (an extension module interrupted while it initialises can crash the process,
    as jaxlib's did with a segmentation fault): then a moment later, once it is out of them."""
    while frame is not None:
        code = frame.f_code
        if code is _unraisable.__code__ or code.co_filename.startswith("<frozen importlib._bootstrap"):
            _rearm()
            return
        frame = frame.f_back
    _cancel_redelivery()
    raise interrupt_for()


def _redeliver(signum: int, frame) -> None:
    """SIGALRM, armed by `_rearm`: raise the stop request's interrupt now, if it is safe."""
    if _signum is None or _deferred or not _depth:
        return
    _raise_when_safe(frame)


def _rearm() -> None:
    """SIGALRM in REDELIVER_AFTER_S (installing its handler the first time). Only C calls: it runs in the hook."""
    if signal.getsignal(signal.SIGALRM) is not _redeliver:
        _previous.setdefault(signal.SIGALRM, signal.signal(signal.SIGALRM, _redeliver))
    signal.setitimer(signal.ITIMER_REAL, REDELIVER_AFTER_S)


def _cancel_redelivery() -> None:
    """Disarm a pending `_rearm`: the interrupt is being raised now, and a second one would cut short the clean-up
    its handlers start (a `record` stopped while it listed the episodes it kept printed only `interrupted`)."""
    if signal.SIGALRM in _previous and _thread.get_ident() == _main_ident:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _unraisable(unraisable) -> None:
    # Only C calls in here: a signal handled inside this hook would be printed with a traceback.
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _signum is not None:
        if not _deferred and _depth and _thread.get_ident() == _main_ident:
            _rearm()  # eaten where it was raised: raised again a moment later, somewhere else
        return
    (_previous_hook or sys.__unraisablehook__)(unraisable)


def _install() -> None:
    global _depth, _signum, _previous_hook, _reported
    if _depth == 0:
        _signum, _reported = None, False
        for signum in SIGNALS:
            _previous[signum] = signal.signal(signum, _handle)
        _previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
        accept_held_stops()
    _depth += 1


def _uninstall() -> None:
    global _depth, _previous_hook
    _depth -= 1
    if _depth == 0:
        if signal.SIGALRM in _previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in _previous.items():
            signal.signal(signum, handler)
        _previous.clear()
        sys.unraisablehook, _previous_hook = _previous_hook or sys.__unraisablehook__, None


@contextlib.contextmanager
def handling():
    """Record and raise SIGINT / SIGTERM as described in the module doc; nests (the outermost one installs the
    handlers, forgets an earlier stop request, and restores the previous handlers on exit). Only the main thread can
    install handlers; elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _install()
    try:
        yield
    finally:
        _uninstall()


def run_program(main: Callable[[], int | None]) -> int:
    """Run a program's `main()` (a bench, a script) inside :func:`handling`: SIGTERM unwinds as SIGINT does, so what
    it started is stopped on the way out, and a stop ends it as stopped (one line, status 130 / 143), also one that
    came while it cleaned up. Returns main's exit status (anything but an int, such as None or the figures it
    printed, counts as 0)."""
    with handling():
        try:
            status = main()
        except KeyboardInterrupt as stopped:  # also Terminated (SIGTERM)
            exit_stopped(stopped)
    if _signum is not None:
        exit_stopped()
    return status if isinstance(status, int) else 0


def active() -> bool:
    """Whether :func:`handling` is active (and this is the main thread)."""
    return _depth > 0 and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deferred():
    """While active, a stop request is only recorded: the code inside checks :func:`requested` at safe points."""
    global _deferred
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1


@contextlib.contextmanager
def uninterrupted():
    """A short step that must finish once begun (a dataset commit, a folder renamed into place): a stop request that
    comes during it is held, then raised as it ends, where the command's handling would have raised it (inside
    :func:`deferred` it stays recorded for the loop to see)."""
    with deferred():
        yield
    if _signum is not None and not _deferred and active() and signal.getsignal(signal.SIGINT) is _handle:
        check()


def record_only() -> None:
    """From now on a stop request is only recorded (the command is done: the interpreter is shutting down). Only
    after :func:`install_for_process`."""
    global _deferred, _record_only
    if _process_handling is not None and not _record_only:
        _record_only = True
        _deferred += 1


def install_for_process() -> None:
    """For a console entry point, as early as possible: :func:`handling` for the rest of the process's life. A stop
    request that comes once the command is done (:func:`record_only`, while the interpreter shuts down) still ends
    the process as stopped, with its one line, at the last exit handler."""
    global _process_handling
    import atexit

    if _process_handling is not None or threading.current_thread() is not threading.main_thread():
        return
    _install()  # never uninstalled: the process ends with them
    _process_handling = True
    atexit.register(_exit_if_stopped)  # registered first, so it runs after every other exit handler


def _exit_if_stopped() -> None:
    import os

    record_only()
    if _signum is None:
        return
    if report_once():
        print(message(), file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(exit_status())


def exit_stopped(exc: BaseException | None = None):
    """End a stopped command: its one line (once) and exit status 130 / 143. Raises SystemExit, or leaves at once
    with os._exit when JAX is loaded (an XLA thread may still be compiling: tearing the interpreter down under it
    aborts). `exc` is what the command ended with: a Terminated without a recorded request means SIGTERM."""
    import os

    signum = _signum
    if signum is None:
        signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
    if report_once():
        print(message(signum), file=sys.stderr)
    status = exit_status(signum)
    if "jax" in sys.modules:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)
    raise SystemExit(status) from None


# ----- stop flags: a signal only sets a flag that a loop polls (ROS nodes; training outside the command's handling)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What stops a node: SIGINT, SIGTERM and SIGHUP (the terminal of a node started by hand closed)."""


class StopFlag:
    """Set by a signal handler (or by hand); a loop polls it. Keeps the first signal's number."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_number: int | None = None

    def set(self, signal_number: int | None = None) -> None:
        if self.signal_number is None:
            self.signal_number = signal_number
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


@contextlib.contextmanager
def held_stops():
    """Start a child inside this: it starts with the stop signals blocked (the signal mask is inherited through fork
    and exec), so a stop that comes while its interpreter starts and imports stays pending, and reaches the child's
    own handlers once they are in (:func:`accept_held_stops`), instead of ending it in the middle of Python's start-up
    (``Fatal Python error: init_import_site``) or of an import. Only for children that call
    :func:`accept_held_stops` (the project's programs do, as they install their handlers): for any other the stop
    waits for SIGKILL."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def accept_held_stops() -> None:
    """Unblock the stop signals that a launcher held for this process while it started (:func:`held_stops`): one
    that came meanwhile is handled now, by the handlers just installed. Nothing to do for a process started otherwise.
    Main thread only: threads started before this keep them blocked, so the main thread receives them."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def install_stop_signals(flag: StopFlag, signals: Iterable[int] = STOP_SIGNALS) -> Callable[[], None]:
    """Make each of `signals` set `flag` (and record the stop request, :func:`note`, for the `robot-rl` command that
    may run the node); return a function that restores the previous handlers (main thread only)."""

    def handle(received: int, _frame) -> None:
        flag.set(received)
        note(received)

    previous = {}
    for number in signals:
        previous[number] = signal.signal(number, handle)

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, handler)

    return restore
