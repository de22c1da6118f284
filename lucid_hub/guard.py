"""Guard processes: work that untrusted input can make unbounded runs in a child process
that is killed at its deadline (and runs under a memory limit), so the hub never hangs or
crashes with it. Canonicalisation (`rdf/canon.py`) and SPARQL (`store/sparql.py`) use it.

The child runs `module:function(request: Frame) -> Frame` for each request, one at a time,
speaking length-prefixed frames on stdin/stdout. A frame is a JSON header and a body.

Hand-written rather than multiprocessing/concurrent.futures: neither can kill one hung
call and go on, and a plain child process avoids re-importing the caller's __main__.

A guard process is a fork of a **zygote**: a child of the hub process, started at its first
guard, that imports each guard's module once, at the first guard of its kind. A new interpreter and its imports cost
0.3 s of CPU, at every guard a hub starts and again after every kill at a deadline (which a
partner's overrunning queries cause at will); a fork of the zygote costs a few milliseconds.
The zygote is handed each guard's two pipes over a Unix socket (SCM_RIGHTS) and answers with
its pid; the hub kills and watches it through a pidfd. Where a zygote cannot run (no pidfd,
no fork), a guard is a new interpreter as before.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any

# Seconds a new guard process may take to start (interpreter, imports), apart from the work.
STARTUP_TIMEOUT = 60.0
# What a handler raises when the content it was sent cannot be evaluated (an invalid term a
# query builds, a language tag, a lone surrogate): reported as "unprocessable", which the hub
# answers with a 4xx, never as the worker's own failure. The guard's workers evaluate hostile
# text on read-only copies, so such an error cannot have left anything half done.
EVALUATION_ERRORS = (ValueError, TypeError, AttributeError, KeyError, IndexError, ArithmeticError)


@dataclass
class Frame:
    """A message between a hub process and its guard: a JSON header and a byte body."""

    header: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""

    def encode(self) -> bytes:
        head = json.dumps(self.header, separators=(",", ":")).encode()
        return struct.pack(">QQ", len(head), len(self.body)) + head + self.body


class GuardFailed(Exception):
    """The guard did not answer: it overran its deadline, hit its memory limit or crashed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class GuardProcess:
    """One child Python serving `target` ("module:function") for frames, until killed."""

    def __init__(self, target: str, memory_mb: int, env: dict[str, str] | None = None) -> None:
        environment = {**os.environ, **(env or {}), "LUCID_GUARD_MEMORY_MB": str(memory_mb)}
        self.proc: subprocess.Popen[bytes] | Forked
        try:
            self.proc = Zygote.here().fork(target, environment)
        except (OSError, GuardFailed):  # no zygote here: a new interpreter
            self.proc = subprocess.Popen(
                [sys.executable, "-c", f"from lucid_hub.guard import serve; serve({target!r})"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=environment,
            )
        self.ready = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    def call(self, request: Frame, timeout: float) -> Frame:
        """Send a request, wait for its answer; GuardFailed (the caller kills) otherwise."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if not self.ready:
            # Start-up (interpreter, imports) is not the job's work: wait for it separately.
            try:
                _read_frame(self.proc.stdout, time.monotonic() + STARTUP_TIMEOUT, STARTUP_TIMEOUT)
            except GuardFailed as failure:
                raise GuardFailed(f"could not start: {failure.reason}") from None
            self.ready = True
        deadline = time.monotonic() + timeout
        try:
            self.proc.stdin.write(request.encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise GuardFailed("failed: the guard process stopped") from None
        return _read_frame(self.proc.stdout, deadline, timeout)


def _read_exactly(stream: IO[bytes], size: int, deadline: float, timeout: float) -> bytes:
    fd = stream.fileno()
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            raise GuardFailed(f"exceeded the work limit of {timeout:g} s")
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise GuardFailed("exceeded the memory limit or crashed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_frame(stream: IO[bytes], deadline: float, timeout: float) -> Frame:
    head_size, body_size = struct.unpack(">QQ", _read_exactly(stream, 16, deadline, timeout))
    header = json.loads(_read_exactly(stream, head_size, deadline, timeout))
    return Frame(header, _read_exactly(stream, body_size, deadline, timeout))


def _read_blocking(stream: IO[bytes]) -> Frame | None:
    sizes = stream.read(16)
    if len(sizes) < 16:
        return None
    head_size, body_size = struct.unpack(">QQ", sizes)
    header = json.loads(stream.read(head_size))
    return Frame(header, stream.read(body_size))


# Linux seccomp, for `no_network`: written by hand because it is a dozen BPF instructions
# and no maintained pure-Python package provides it (python-libseccomp needs a C library).
_AUDIT_ARCH = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}  # (arch, socket syscall)
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_ALLOW, _ERRNO_EACCES = 0x7FFF0000, 0x00050000 | 13
_INET_FAMILIES = (2, 10)  # AF_INET, AF_INET6


def no_network() -> bool:
    """Forbid this process to open internet sockets from now on (socket(AF_INET/AF_INET6)
    fails with EACCES), whatever library asks: a second wall behind the checks that refuse
    SERVICE and LOAD. True when in force; False where seccomp is not available."""
    import ctypes
    import platform

    machine = platform.machine()
    if sys.platform != "linux" or machine not in _AUDIT_ARCH:
        return False
    arch, socket_nr = _AUDIT_ARCH[machine]

    def stmt(code: int, k: int) -> bytes:
        return struct.pack("HBBI", code, 0, 0, k)

    def jump(code: int, k: int, if_true: int, if_false: int) -> bytes:
        return struct.pack("HBBI", code, if_true, if_false, k)

    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    program = b"".join([
        stmt(ld_w_abs, 4),  # seccomp_data.arch
        jump(jeq_k, arch, 1, 0),
        stmt(ret_k, _ERRNO_EACCES),  # another ABI (e.g. x32 on x86_64): nothing to call
        stmt(ld_w_abs, 0),  # seccomp_data.nr
        jump(jge_k, 0x40000000, 0, 1),  # x32 system call numbers
        stmt(ret_k, _ERRNO_EACCES),
        jump(jeq_k, socket_nr, 0, 4),
        stmt(ld_w_abs, 16),  # seccomp_data.args[0], low half: the address family
        jump(jeq_k, _INET_FAMILIES[0], 1, 0),
        jump(jeq_k, _INET_FAMILIES[1], 0, 1),
        stmt(ret_k, _ERRNO_EACCES),
        stmt(ret_k, _ALLOW),
    ])
    instructions = len(program) // 8
    buffer = ctypes.create_string_buffer(program)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(instructions, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return bool(libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0)


def serve(target: str) -> None:
    """The guard process's main loop: answer frames with `target` until stdin closes.
    With LUCID_GUARD_NO_NETWORK set, the process cannot open internet sockets."""
    import resource

    limit = int(os.environ.get("LUCID_GUARD_MEMORY_MB", "2048")) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    module, _, name = target.partition(":")
    handle = getattr(importlib.import_module(module), name)
    if os.environ.get("LUCID_GUARD_NO_NETWORK") and not no_network():
        print("lucid-hub guard: seccomp is not available; internet sockets stay open", file=sys.stderr)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(Frame({"status": "ready"}).encode())
    stdout.flush()
    while True:
        request = _read_blocking(stdin)
        if request is None:
            return
        try:
            answer: Frame = handle(request)
        except EVALUATION_ERRORS as exc:  # the request's content could not be evaluated: its sender's to mend
            answer = Frame({"status": "error", "kind": "unprocessable",
                            "message": f"it could not be evaluated: {type(exc).__name__}: {exc}"})
        except Exception as exc:  # reported to the parent, which raises its own error
            answer = Frame({"status": "error", "kind": "internal", "message": f"{type(exc).__name__}: {exc}"})
        stdout.write(answer.encode())
        stdout.flush()


# --- the zygote ----------------------------------------------------------------------------
class Forked:
    """A guard forked by the zygote, as the hub sees it: its pipes, and a pidfd to watch and
    kill it by (it is the zygote's child, not ours; the kernel reaps it)."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self._pidfd: int | None = os.pidfd_open(pid)

    def poll(self) -> int | None:
        """None while it runs (its exit status is the zygote's to collect: 0 once ended)."""
        if self._pidfd is None or select.select([self._pidfd], [], [], 0)[0]:
            return 0
        return None

    def kill(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):  # (ended already)
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def wait(self) -> int:
        if self._pidfd is not None:
            select.select([self._pidfd], [], [])
            os.close(self._pidfd)
            self._pidfd = None
        return 0

    def __del__(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)


class Zygote:
    """The zygote of this process (started at the first guard; a forked hub process starts
    its own). It ends when this process closes its socket, at exit."""

    _here: tuple[int, Zygote] | None = None
    _start_lock = threading.Lock()

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", "from lucid_hub.guard import zygote; zygote()"],
                                         stdin=theirs.fileno())
        finally:
            theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self.sock.settimeout(STARTUP_TIMEOUT)
        try:
            if self.sock.recv(16) != b"ready":
                raise GuardFailed("the zygote did not start")
        except (OSError, GuardFailed):
            self.close()
            raise

    @classmethod
    def here(cls) -> Zygote:
        with cls._start_lock:
            if cls._here is None or cls._here[0] != os.getpid() or cls._here[1].proc.poll() is not None:
                if not hasattr(os, "pidfd_open"):
                    raise GuardFailed("no pidfd on this system")
                cls._here = (os.getpid(), cls())
            return cls._here[1]

    def fork(self, target: str, env: dict[str, str]) -> Forked:
        """A guard serving `target` with `env` as its environment."""
        guard_in, hub_out = os.pipe()  # the guard's stdin
        hub_in, guard_out = os.pipe()  # the guard's stdout
        try:
            with self.lock:
                socket.send_fds(self.sock, [json.dumps({"target": target, "env": env}).encode()],
                                [guard_in, guard_out])
                answer = self.sock.recv(64)
            if len(answer) != 8:
                raise GuardFailed("the zygote did not answer")
            pid = struct.unpack(">Q", answer)[0]
        except BaseException:
            os.close(hub_out)
            os.close(hub_in)
            raise
        finally:
            os.close(guard_in)
            os.close(guard_out)
        return Forked(pid, os.fdopen(hub_out, "wb"), os.fdopen(hub_in, "rb"))

    def close(self) -> None:
        self.sock.close()  # the zygote reads its end and exits
        self.proc.wait()


def zygote() -> None:
    """The zygote's loop: for each request on the socket (stdin), import the target's module
    (once: the guards of that target after the first start without imports; a command that
    starts one guard pays no more than a new interpreter would), fork a guard on the two pipes
    the request came with, and answer with the guard's pid."""
    sock = socket.socket(fileno=0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the guards
    sock.sendall(b"ready")
    while True:
        try:
            message, fds, _flags, _address = socket.recv_fds(sock, 1 << 20, 2)
        except OSError:
            return
        if not message or len(fds) != 2:
            return
        request = json.loads(message)
        with contextlib.suppress(Exception):  # (a module that cannot be imported: the guard says why)
            importlib.import_module(request["target"].partition(":")[0])
        pid = os.fork()
        if pid == 0:  # the guard
            code = 0
            try:
                sock.close()
                os.dup2(fds[0], 0)
                os.dup2(fds[1], 1)
                for fd in fds:
                    os.close(fd)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.environ.clear()
                os.environ.update(request["env"])
                serve(request["target"])
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        sock.sendall(struct.pack(">Q", pid))
