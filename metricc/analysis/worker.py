"""A worker process that runs one symbolic computation at a time under a hard CPU and memory limit.

SymPy cannot be stopped from inside one ``factor`` or ``cancel`` call, so the
calls that can run away run here (:func:`metricc.analysis.budget.bounded` is the
public entry). One worker per process, forked on first use (Linux only: it
inherits the imported modules, so a call costs a pickle round trip, not an
import) and kept for the next call. Three limits, each a backstop for the one
before:

* in the worker, ``setitimer(ITIMER_PROF)`` raises :class:`Interrupted` (a
  ``BaseException``, so SymPy's ``except Exception`` cannot swallow it) after
  ``seconds`` of CPU; the worker survives and answers ``"time"``;
* the parent polls the worker's CPU time (``/proc``) and kills it at ``seconds + 1``
  (a C call such as a huge integer product does not see the signal), and kills it
  after ``max(30, 10 * seconds)`` wall seconds whatever it is doing (a worker that
  cannot run: deadlocked on a lock another parent thread held at the fork);
* ``RLIMIT_AS`` lets the worker's address space grow by at most ``memory`` bytes
  per call: past it Python raises ``MemoryError`` (answered ``"memory"``, and the
  worker exits) or a C library aborts (answered ``"crashed"``).

Parent and worker talk over a socket pair, written with ``MSG_NOSIGNAL``: a worker
that died (killed from outside) is a ``BrokenPipeError``, never a ``SIGPIPE`` that kills a
program which restored the default handler (exit 141, no message), and a worker found dead
before a call is replaced. The worker dies with the parent process (``PR_SET_PDEATHSIG``)
only when the main thread forked it: Linux sends that signal when the forking *thread*
ends, and a worker started by a short-lived thread must outlive it (it still exits at
end-of-file on its socket once the parent is gone, and its timer bounds any call).

Only the forking thread exists in the worker; the work is pure Python (SymPy,
mpmath), so torch's intra-op threads, which are not copied, are never needed
there. Platforms without ``fork`` (and ``METRICC_ANALYSIS_WORKER=0``) run the
computation in-process, bounded only between SymPy calls as before.

>>> run(sum, ([1, 2, 3],), {}, 1.0, 1 << 30)[0]
6
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import resource
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import MetricError

__all__ = ["AVAILABLE", "BudgetExceeded", "Interrupted", "in_worker", "run", "shutdown", "worker_cpu",
           "worker_pid"]

#: Whether computations can run in a worker here (Linux with ``fork``, not disabled).
AVAILABLE = (sys.platform.startswith("linux") and hasattr(os, "fork")
             and os.environ.get("METRICC_ANALYSIS_WORKER", "1") != "0")
_KILL_GRACE = 1.0
_WALL_FACTOR, _WALL_MIN = 10.0, 30.0
_HEADER = struct.Struct("!Q")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class BudgetExceeded(MetricError):
    """A bounded computation ran out of CPU time or memory, or its worker died.

    ``reason`` is ``"time"``, ``"memory"`` or ``"crashed"``; ``cpu`` the CPU seconds it used.
    """

    def __init__(self, reason: str, cpu: float, seconds: float) -> None:
        super().__init__(f"the symbolic analysis stopped ({reason}) after {cpu:.2f} s of CPU "
                         f"(budget {seconds:.2f} s); simplify the formula or split it with let-bindings")
        self.reason, self.cpu = reason, cpu

    def __reduce__(self) -> tuple[Any, ...]:
        return (BudgetExceeded, (self.reason, self.cpu, 0.0))


class Interrupted(BaseException):
    """Raised inside the worker when a computation's CPU time is up."""


_IN_WORKER = False


def in_worker() -> bool:
    """True inside the worker (nested bounded calls then run in-process, under its limit)."""
    return _IN_WORKER


# --- the worker side ------------------------------------------------------------------------

def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        try:
            c = sock.recv(min(n - got, 1 << 20))
        except ConnectionResetError:
            return None
        if not c:
            return None
        chunks.append(c)
        got += len(c)
    return b"".join(chunks)


def _send(sock: socket.socket, data: bytes) -> None:
    # MSG_NOSIGNAL: a closed other end is an OSError here, not SIGPIPE for the process
    sock.sendall(_HEADER.pack(len(data)) + data, socket.MSG_NOSIGNAL)


def _recv(sock: socket.socket) -> bytes | None:
    head = _read_exact(sock, _HEADER.size)
    return None if head is None else _read_exact(sock, _HEADER.unpack(head)[0])


def _on_timer(signum: int, frame: Any) -> None:
    raise Interrupted


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _answer(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
            seconds: float, memory: int) -> tuple[str, Any]:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space() + memory
    try:
        resource.setrlimit(resource.RLIMIT_AS, (min(limit, hard) if hard >= 0 else limit, hard))
        # Fires again every 0.1 s in case some code catches BaseException once.
        signal.setitimer(signal.ITIMER_PROF, seconds, 0.1)
        return "ok", fn(*args, **kwargs)
    except Interrupted:
        return "time", None
    except MemoryError:
        return "memory", None
    except Exception as e:  # the caller re-raises it, as if it ran in-process
        return "error", e
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def _serve(conn: socket.socket, parent: int, die_with_parent: bool) -> None:
    global _IN_WORKER
    _IN_WORKER = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which kills us
    signal.signal(signal.SIGPROF, _on_timer)
    if die_with_parent:  # forked by the main thread, which lives as long as the process
        with contextlib.suppress(OSError, AttributeError):  # Linux prctl
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the prctl
            return
    while (data := _recv(conn)) is not None:
        start = time.process_time()
        try:
            fn, args, kwargs, seconds, memory = pickle.loads(data)
            status, value = _answer(fn, args, kwargs, seconds, memory)
        except Interrupted:  # the timer fired as the call returned
            status, value = "time", None
        except Exception as e:  # e.g. a function defined in __main__ after the fork
            status, value = "error", MetricError(f"analysis failed: {type(e).__name__}: {e}")
        cpu = time.process_time() - start
        try:
            out = pickle.dumps((status, value, cpu))
        except Exception as e:  # an unpicklable result or exception
            out = pickle.dumps(("error", MetricError(f"analysis failed: {type(e).__name__}: {e}"), cpu))
        try:
            _send(conn, out)
        except OSError:  # the parent is gone
            return
        if status == "memory":  # the heap may be fragmented past use: a fresh worker next time
            return


# --- the parent side ------------------------------------------------------------------------

class _Worker:
    def __init__(self) -> None:
        self.sock, child = socket.socketpair()
        self.owner = os.getpid()
        main = threading.current_thread() is threading.main_thread()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child process
            try:
                self.sock.close()
                _serve(child, self.owner, main)
            finally:
                os._exit(0)
        child.close()

    def alive(self) -> bool:
        """Whether the worker process still runs (a dead one is reaped here)."""
        try:
            return os.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def cpu(self) -> float:
        """CPU seconds the worker has used (user + system), or 0 once it is gone."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _TICKS
        except (OSError, IndexError, ValueError):
            return 0.0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.pid, 0)

    def call(self, request: bytes, seconds: float) -> tuple[str, Any, float]:
        _send(self.sock, request)
        start_cpu, start_wall = self.cpu(), time.monotonic()
        wall_limit = max(_WALL_MIN, _WALL_FACTOR * seconds)
        while not select.select([self.sock], [], [], 0.02)[0]:
            used = self.cpu() - start_cpu
            if used > seconds + _KILL_GRACE or time.monotonic() - start_wall > wall_limit:
                raise BudgetExceeded("time", used, seconds)
        data = _recv(self.sock)
        if data is None:  # it died: a C library aborted (out of memory), or a stack overflow
            raise BudgetExceeded("crashed", self.cpu() - start_cpu, seconds)
        return pickle.loads(data)


_LOCK = threading.Lock()
_WORKER: _Worker | None = None


def worker_pid() -> int | None:
    """The worker's process id, or ``None`` when none is running."""
    return _WORKER.pid if _WORKER is not None and _WORKER.owner == os.getpid() else None


def worker_cpu() -> float:
    """CPU seconds the running worker has used so far (0 when none): for measuring budgets."""
    return _WORKER.cpu() if worker_pid() is not None else 0.0  # type: ignore[union-attr]


def shutdown() -> None:
    """Stop the worker (it is started again on the next call); registered with ``atexit``."""
    global _WORKER
    with _LOCK:
        if _WORKER is not None and _WORKER.owner == os.getpid():
            _WORKER.close()
        _WORKER = None


def _forget() -> None:
    # In a forked copy of the parent (a DataLoader worker): that worker belongs to the parent.
    global _WORKER, _LOCK
    _WORKER, _LOCK = None, threading.Lock()


def run(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
        seconds: float, memory: int) -> tuple[Any, float]:
    """``(fn(*args, **kwargs), cpu seconds)``, computed in the worker under the limits.

    Raises :class:`BudgetExceeded` past them, and what ``fn`` raised otherwise.
    Where the worker is not :data:`AVAILABLE` (or inside it) ``fn`` runs here.
    """
    global _WORKER
    if not AVAILABLE or _IN_WORKER:
        start = time.process_time()
        return fn(*args, **kwargs), time.process_time() - start
    request = pickle.dumps((fn, args, kwargs, seconds, memory))
    with _LOCK:
        if _WORKER is not None and _WORKER.owner == os.getpid() and not _WORKER.alive():
            _WORKER.close()  # killed between calls: a fresh one answers this call
            _WORKER = None
        if _WORKER is None or _WORKER.owner != os.getpid():
            _WORKER = _Worker()
        worker = _WORKER
        try:
            status, value, cpu = worker.call(request, seconds)
        except BaseException as e:  # timed out, died, or Ctrl-C in the parent: never reuse it
            worker.close()
            _WORKER = None
            if isinstance(e, OSError):  # a worker killed from outside: a broken pipe
                raise BudgetExceeded("crashed", 0.0, seconds) from None
            raise
        if status == "memory":
            worker.close()
            _WORKER = None
    if status == "ok":
        return value, cpu
    if status == "error":
        raise value
    raise BudgetExceeded(status, cpu, seconds)


if AVAILABLE:
    atexit.register(shutdown)
    os.register_at_fork(after_in_child=_forget)
