"""Run untrusted programs (model-written code) in a separate, limited process.

Every program runs in its own process, never inside the framework: `sys.executable -I -S -B` (isolated mode, no
site-packages, no bytecode writes; the standard library stays importable) with a scrubbed environment
(`PATH=/usr/bin:/bin`, `LANG=C.UTF-8`, `HOME` pointing at the working directory, nothing else), a fresh
temporary working directory that is deleted afterwards, and a wall-clock timeout after which the whole process
group is killed. Before the program starts, a small trusted prelude inside the child process sets rlimits
(CPU seconds, address space, number of processes, file size, no core files) and installs a Python audit hook.

What is covered, in two modes (chosen once per process; see `isolation()`):

* **namespace** (Linux, running as root, `unshare` and `setpriv` usable; the default on the project machines):
  the child runs in new network, mount and PID namespaces with its own `/proc`
  (`unshare --net --mount --pid --fork --kill-child --mount-proc`), so it sees only its own processes (no other
  process's environment or command line) and cannot signal anything outside. The network namespace has only a
  loopback interface that is down, so every connection (127.0.0.1 or a public address) fails in the kernel.
  Directories that may hold secrets or answers are hidden under empty read-only tmpfs: `/root`, `/home`, `$HOME`,
  the project checkout, the venv, `$RELAXSPEC_CACHE` and `$RELAXSPEC_DATA` (see `_hidden_dirs`); only the
  interpreter's installation prefix is bound back when it lives under one of them (it runs as the real binary,
  `os.path.realpath(sys.executable)`, with `-I -S`, so no venv is needed). `/etc/shadow` and `/etc/gshadow` are
  masked with `/dev/null`. Every mount is remounted read-only inside the mount namespace except a bind
  mount of the working directory, and fresh small tmpfs are mounted over `/tmp`, `/var/tmp`, `/dev/shm` and
  `/run` (which also hides host unix sockets such as `/run/docker.sock`; read-only mounts do not stop `connect()`
  to a socket file), so writes elsewhere fail (or land in a tmpfs that vanishes with the namespace). All capabilities
  are dropped (`setpriv`, bounding set emptied, no-new-privs), so the program cannot remount or undo this. The
  PID namespace makes every descendant (double-forked daemons included) die with the program. Because uid 0 is exempt from `RLIMIT_NPROC`, the
  number of processes is capped by a per-run `pids` cgroup (`pids.max`) when one can be created (cgroup v1
  `/sys/fs/cgroup/pids` or v2); without one, process creation is blocked by the audit hook instead.
* **fallback** (anything else, e.g. not root or no `unshare`): same process, rlimits and timeout, but no
  namespaces. Network and file-system protection then rest on the Python audit hook only, which refuses
  non-`AF_UNIX` sockets, writes/creates/renames/deletes outside the working directory, reads and listings of the
  hidden directories above and of other processes' `/proc/<pid>/`, `ctypes` library loading and (when
  `RLIMIT_NPROC` cannot bind, i.e. as root) process creation. A daemon that calls `os.setsid()` can outlive the
  sample in this mode when processes are allowed (not root). An audit hook is a guard against
  accidents and ordinary model code, not against a determined attacker (C extensions can bypass it).

What is not covered: CPU/memory side channels, kernel exploits, a program that deliberately lies about its result
through a shared resource. A program that exits early with status 0 is not counted as passing: the prelude writes
a random nonce (sent via stdin, never visible to the program) to stdout only after the program finished normally,
and `passed` requires it. In both modes the audit hook also refuses `os.kill`/`os.killpg` aimed at anything but the
program and its descendants (so such an attempt is reported as a failed sample with a clear reason).

`tests/reliability/test_sandbox_attacks.py` runs the attack catalogue (docs/RELIABILITY.md) against both layers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

__all__ = ["SandboxResult", "isolation", "run_many", "run_program"]

_MiB = 1 << 20

# Trusted prelude run by the child interpreter before the untrusted program (passed with `-c`).
# argv[1] is a JSON dict of limits; stdin carries the nonce line followed by nothing else.
_PRELUDE = r'''
import json, os, resource, sys
def _setup():
    cfg = json.loads(sys.argv[1])
    nonce = sys.stdin.readline().strip()
    try:
        os.close(0)
        os.open(os.devnull, os.O_RDONLY)
    except OSError:
        pass
    lim = [(resource.RLIMIT_CPU, (cfg["cpu"], cfg["cpu"] + 1)),
           (resource.RLIMIT_AS, (cfg["as"], cfg["as"])),
           (resource.RLIMIT_FSIZE, (cfg["fsize"], cfg["fsize"])),
           (resource.RLIMIT_CORE, (0, 0)),
           (resource.RLIMIT_NPROC, (cfg["nproc"], cfg["nproc"]))]
    for res, val in lim:
        try:
            resource.setrlimit(res, val)
        except (ValueError, OSError):
            resource.setrlimit(res, (min(val[0], resource.getrlimit(res)[1]), resource.getrlimit(res)[1]))
    with open("program.py", encoding="utf-8") as f:
        src = f.read()
    root = os.path.realpath(os.getcwd())
    block_proc = cfg["block_proc"]
    WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    PATH_EVENTS = {"os.mkdir": 1, "os.rename": 2, "os.replace": 2, "os.remove": 1, "os.rmdir": 1,
                   "os.symlink": 2, "os.link": 2, "os.chmod": 1, "os.chown": 1, "os.truncate": 1,
                   "os.utime": 1, "shutil.rmtree": 1, "shutil.copyfile": 2, "shutil.move": 2}
    PROC_EVENTS = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "os.startfile", "pty.spawn"}
    def inside(p):
        if isinstance(p, int):
            return True
        try:
            p = os.fsdecode(p)
        except TypeError:
            return False
        if p == os.devnull:
            return True
        rp = os.path.realpath(p)
        return rp == root or rp.startswith(root + os.sep)
    hidden = [os.path.join(h, "") for h in cfg["hide"]]
    keep = [os.path.join(k, "") for k in cfg["keep"]]
    me = os.getpid()
    busy = set()
    from _thread import get_ident
    def readable(p):
        """Fallback read guard: hidden directories (homes, project, venv) and other processes' /proc."""
        if isinstance(p, int) or not (hidden or cfg["guard_proc"]):
            return True
        try:
            rp = os.path.join(os.path.realpath(os.fsdecode(p)), "")
        except (TypeError, ValueError):
            return False
        if cfg["guard_proc"] and rp.startswith("/proc/"):
            first = rp.split("/")[2]
            if first.isdigit() and int(first) != me:
                return False
        if any(rp.startswith(k) for k in keep):
            return True
        return not any(rp.startswith(h) for h in hidden)
    def descendant(pid):
        for _ in range(64):
            if pid == me:
                return True
            if pid <= 1:
                return False
            try:
                with open("/proc/%d/stat" % pid, "rb") as f:
                    st = f.read()
                pid = int(st[st.rindex(b")") + 2:].split()[1])
            except (OSError, ValueError):
                return False
        return False
    def hook(event, args):
        tid = get_ident()
        if tid in busy:  # an event raised by the hook's own /proc reads
            return
        busy.add(tid)
        try:
            _check(event, args)
        finally:
            busy.discard(tid)
    def _check(event, args):
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & WRITE)
            if writing and not inside(path):
                raise PermissionError("sandbox: write outside the working directory: %r" % (path,))
            if not writing and path is not None and not readable(path):
                raise PermissionError("sandbox: read outside the allowed directories: %r" % (path,))
        elif event in ("os.listdir", "os.scandir"):
            if args and args[0] is not None and not readable(args[0]):
                raise PermissionError("sandbox: read outside the allowed directories: %r" % (args[0],))
        elif event in ("os.kill", "os.killpg"):
            pid = args[0]
            if event == "os.killpg":
                pid = -pid if pid > 0 else pid
            if pid == -1 or (pid > 0 and not descendant(pid)) or (pid < -1 and -pid != os.getpgrp()):
                raise PermissionError("sandbox: signalling processes outside the program is disabled")
        elif event in PATH_EVENTS:
            for p in args[:PATH_EVENTS[event]]:
                if p is not None and not inside(p):
                    raise PermissionError("sandbox: %s outside the working directory: %r" % (event, p))
        elif event == "socket.__new__":
            import socket
            if args[1] not in (socket.AF_UNIX, -1):
                raise PermissionError("sandbox: network access is disabled")
        elif event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
            if not isinstance(args[1], (str, bytes)):
                raise PermissionError("sandbox: network access is disabled")
        elif event.startswith("ctypes.dl"):
            raise PermissionError("sandbox: ctypes library loading is disabled")
        elif block_proc and event in PROC_EVENTS:
            raise PermissionError("sandbox: process creation is disabled")
    sys.addaudithook(hook)
    return src, nonce
_src, _nonce = _setup()
del _setup
sys.argv = ["program.py"]
_g = {"__name__": "__main__", "__file__": "program.py", "__builtins__": __builtins__}
exec(compile(_src, "program.py", "exec"), _g)
sys.stdout.flush()
sys.stderr.flush()
os.write(1, ("\n" + _nonce + "\n").encode())
'''

# Runs inside the new namespaces as pid 1 (as root, before dropping capabilities). $1 = working directory,
# $2 = directories to hide (newline-separated), $3 = directories under them to keep visible (the interpreter's
# prefix), remaining args = the interpreter command. Exit code 97 = setup failed.
_NS_SETUP = r"""
W="$1"; HIDE="$2"; KEEP="$3"; shift 3
set -f
IFS='
'
mount --make-rprivate / 2>/dev/null
mount --bind "$W" "$W" || { echo "sandbox setup: bind mount failed" >&2; exit 97; }
cd "$W" || exit 97
S="$W/.sandbox-keep"; i=0
for k in $KEEP; do
  mkdir -p "$S/$i" && mount --bind "$k" "$S/$i" || { echo "sandbox setup: cannot keep $k" >&2; exit 97; }
  i=$((i+1))
done
for h in $HIDE; do
  [ -d "$h" ] || continue
  mount -t tmpfs -o size=1m,mode=755,nosuid,nodev tmpfs "$h" || { echo "sandbox setup: cannot hide $h" >&2; exit 97; }
done
i=0
for k in $KEEP; do
  mkdir -p "$k" && mount --bind "$S/$i" "$k" && umount "$S/$i" && rmdir "$S/$i" \
    || { echo "sandbox setup: cannot restore $k" >&2; exit 97; }
  i=$((i+1))
done
[ -d "$S" ] && rmdir "$S"
for f in /etc/shadow /etc/gshadow /etc/shadow- /etc/gshadow-; do
  [ -f "$f" ] && mount --bind /dev/null "$f"
done
for mp in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  [ "$mp" = "$W" ] && continue
  mount -o remount,bind,ro "$mp" 2>/dev/null
done
mount -o remount,bind,ro / || { echo "sandbox setup: read-only remount failed" >&2; exit 97; }
for d in /tmp /var/tmp /dev/shm /run; do
  [ -d "$d" ] && mount -t tmpfs -o size=16m,mode=1777,nosuid,nodev tmpfs "$d" 2>/dev/null
done
setpriv --inh-caps=-all --bounding-set=-all --no-new-privs -- \
  env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME="$W" "$@"
exit $?
"""

# unshare: new network, mount and PID namespaces with a fresh /proc (only the sandbox's processes visible);
# --kill-child: the namespace (and everything in it) dies with unshare.
_UNSHARE = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _interpreter() -> str:
    """The real interpreter binary (a venv's `bin/python` is a symlink into the base installation)."""
    return os.path.realpath(sys.executable)


def _keep_dirs() -> list[str]:
    """Directories the sandboxed interpreter needs: its installation prefix (stdlib, libpython)."""
    out = [os.path.realpath(sys.base_prefix)]
    exe_dir = os.path.dirname(_interpreter())
    if not any(_under(exe_dir, k) for k in out):
        out.append(exe_dir)
    return out


def _hidden_dirs(workdir: str | None = None) -> list[str]:
    """Directories the program must not read: home directories, the project, its venv, caches and data.

    `/tmp`, `/var/tmp`, `/dev/shm` and `/run` are replaced by empty tmpfs anyway. System directories and
    ancestors of the working directory are never hidden.
    """
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cands = ["/root", "/home", os.path.expanduser("~"), project, sys.prefix,
             os.environ.get("RELAXSPEC_CACHE"), os.environ.get("RELAXSPEC_DATA")]
    system = ("/", "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/tmp",
              "/var", "/run", "/opt")
    real: list[str] = []
    for c in cands:
        if not c:
            continue
        r = os.path.realpath(os.path.expanduser(c))
        if r in system or not os.path.isdir(r) or any(_under(s, r) for s in system if s != "/"):
            continue
        if workdir and _under(workdir, r):
            continue
        real.append(r)
    real.sort(key=len)
    out: list[str] = []
    for r in real:
        if not any(_under(r, o) for o in out):
            out.append(r)
    return out


def _ns_command(workdir: str, py: list[str]) -> list[str]:
    hide = _hidden_dirs(workdir)
    keep = [k for k in _keep_dirs() if any(_under(k, h) for h in hide)]
    return [*_UNSHARE, "/bin/sh", "-c", _NS_SETUP, "sh", workdir, "\n".join(hide), "\n".join(keep), *py]


_NONCE_BYTES = 16
_TAIL = 4000


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """Outcome of one sandboxed program.

    Attributes:
        passed: True iff the program ran to completion (exit status 0 and the completion nonce was seen).
        status: One of "passed", "failed" (the program raised or exited non-zero, e.g. a failing assertion),
            "timeout" (wall-clock or CPU limit), "memory" (address-space limit: MemoryError or killed), "error"
            (the sandbox itself could not run the program).
        reason: Short human-readable reason (last traceback line, "timeout after 5.0 s", ...), "" when passed.
        returncode: Exit status of the sandbox process (negative = killed by that signal), None on timeout.
        duration_s: Wall-clock seconds.
        stdout: Tail of the program's stdout (nonce removed).
        stderr: Tail of the program's stderr.
    """

    passed: bool
    status: str
    reason: str
    returncode: int | None = None
    duration_s: float = 0.0
    stdout: str = ""
    stderr: str = ""


def _probe(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@lru_cache(maxsize=1)
def _namespace_ok() -> bool:
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    if not (shutil.which("unshare") and shutil.which("setpriv") and shutil.which("mount")):
        return False
    with tempfile.TemporaryDirectory(prefix="relaxspec-probe-") as d:
        return _probe(_ns_command(os.path.realpath(d), [_interpreter(), "-I", "-S", "-B", "-c", "pass"]))


def _cgroup_root() -> str | None:
    """Directory in which a per-run pids cgroup can be created, or None."""
    for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
        if not os.path.isdir(root):
            continue
        try:
            d = tempfile.mkdtemp(prefix="relaxspec-sbx-", dir=root)
        except OSError:
            continue
        ok = os.path.exists(os.path.join(d, "pids.max"))
        with contextlib.suppress(OSError):
            os.rmdir(d)
        if ok:
            return root
    return None


@lru_cache(maxsize=1)
def isolation() -> dict[str, object]:
    """Describe the isolation this process will use (probed once and cached).

    Returns:
        A dict with `mode` ("namespace" or "fallback"), `network` ("namespace" or "audit-hook"),
        `filesystem` ("read-only mounts" or "audit-hook"), `nproc` ("cgroup", "rlimit" or "audit-hook"),
        `cgroup_root` (path or None).
    """
    ns = _namespace_ok()
    cg = _cgroup_root() if ns else None
    if cg:
        nproc = "cgroup"
    elif os.geteuid() == 0:
        nproc = "audit-hook"
    else:
        nproc = "rlimit"
    return {
        "mode": "namespace" if ns else "fallback",
        "network": "namespace" if ns else "audit-hook",
        "filesystem": "read-only mounts" if ns else "audit-hook",
        "nproc": nproc,
        "cgroup_root": cg,
    }


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _cleanup_cgroup(cg: str | None) -> None:
    if not cg:
        return
    for _ in range(50):
        try:
            with open(os.path.join(cg, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            os.rmdir(cg)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def run_program(
    program: str,
    timeout_s: float = 5.0,
    memory_mb: int = 1024,
    max_procs: int = 16,
    max_file_mb: int = 16,
) -> SandboxResult:
    """Run one Python program in the sandbox and report whether it completed without error.

    Args:
        program: Python source (e.g. HumanEval code + tests + `check(entry_point)`).
        timeout_s: Wall-clock limit in seconds; the CPU-seconds rlimit is derived from it.
        memory_mb: Address-space limit (RLIMIT_AS) in MiB.
        max_procs: Process limit (cgroup `pids.max`, and RLIMIT_NPROC where it binds).
        max_file_mb: Largest file (including captured stdout/stderr) the program may write, in MiB.

    Returns:
        A `SandboxResult`; never raises for anything the program does.
    """
    iso = isolation()
    nonce = secrets.token_hex(_NONCE_BYTES)
    limits = {
        "cpu": max(1, int(timeout_s + 1)),
        "as": int(memory_mb) * _MiB,
        "fsize": int(max_file_mb) * _MiB,
        "nproc": int(max_procs),
        "block_proc": iso["nproc"] == "audit-hook",
    }
    start = time.perf_counter()
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="relaxspec-sbx-"))
    if iso["mode"] == "namespace":  # hiding is done by the mount namespace
        limits.update(hide=[], keep=[], guard_proc=False)
    else:
        limits.update(hide=_hidden_dirs(workdir), keep=_keep_dirs(), guard_proc=True)
    py = [_interpreter(), "-I", "-S", "-B", "-c", _PRELUDE, json.dumps(limits)]
    outdir = tempfile.mkdtemp(prefix="relaxspec-sbx-out-")  # parent-only: the program cannot reach it
    cg: str | None = None
    try:
        with open(os.path.join(workdir, "program.py"), "w", encoding="utf-8") as f:
            f.write(program)
        out_path, err_path = os.path.join(outdir, "stdout"), os.path.join(outdir, "stderr")
        if iso["mode"] == "namespace":
            if iso["cgroup_root"]:
                try:
                    cg = tempfile.mkdtemp(prefix="relaxspec-sbx-", dir=str(iso["cgroup_root"]))
                    with open(os.path.join(cg, "pids.max"), "w") as f:
                        f.write(str(max_procs + 4))  # + sh, setpriv/env, unshare overhead
                except OSError:
                    cg = None
            inner = _ns_command(workdir, py)
            # The outer sh joins the cgroup before exec'ing unshare, so no descendant can escape the limit.
            cmd = ["/bin/sh", "-c", 'if [ -n "$1" ]; then echo $$ > "$1/cgroup.procs" || exit 97; fi; shift; '
                   'exec "$@"', "sh", cg or "", *inner]
            env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
        else:
            cmd = py
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir}
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.PIPE, stdout=out,
                                        stderr=err, start_new_session=True, close_fds=True)
            except OSError as e:
                return SandboxResult(False, "error", f"could not start sandbox: {e}")
            timed_out = False
            try:
                proc.stdin.write((nonce + "\n").encode())
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_group(proc)
            if timed_out:
                proc.wait()
        duration = time.perf_counter() - start
        stdout, stderr = _tail(out_path), _tail(err_path)
        rc = proc.returncode
        seen = nonce in stdout
        stdout = stdout.replace("\n" + nonce + "\n", "")
        common = {"duration_s": duration, "stdout": stdout, "stderr": stderr}
        if timed_out:
            return SandboxResult(False, "timeout", f"timeout after {timeout_s:g} s", None, **common)
        if rc == 0 and seen:
            return SandboxResult(True, "passed", "", rc, **common)
        last = _last_error_line(stderr)
        if rc == 97 and last.startswith("sandbox setup"):
            return SandboxResult(False, "error", last, rc, **common)
        if "MemoryError" in last:
            return SandboxResult(False, "memory", last, rc, **common)
        if rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
            return SandboxResult(False, "timeout", "CPU time limit exceeded", rc, **common)
        if rc in (-signal.SIGKILL, 128 + signal.SIGKILL):
            return SandboxResult(False, "memory", last or "killed by SIGKILL (likely out of memory)", rc, **common)
        if rc == 0:
            return SandboxResult(False, "failed", "exited before the tests finished", rc, **common)
        sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0
        if sig and not last:
            with contextlib.suppress(ValueError):
                last = f"killed by signal {signal.Signals(sig).name}"
        return SandboxResult(False, "failed", last or f"exit status {rc}", rc, **common)
    finally:
        _cleanup_cgroup(cg)
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(outdir, ignore_errors=True)


def run_many(
    programs: Sequence[str],
    n_workers: int = 2,
    timeout_s: float = 5.0,
    memory_mb: int = 1024,
    max_procs: int = 16,
) -> list[SandboxResult]:
    """Run many programs, each in its own sandbox, `n_workers` at a time (order preserved).

    Args:
        programs: Python sources.
        n_workers: Concurrent sandboxes (threads waiting on child processes; the programs run in parallel).
        timeout_s: Per-program wall-clock limit.
        memory_mb: Per-program address-space limit in MiB.
        max_procs: Per-program process limit.

    Returns:
        One `SandboxResult` per program, in input order.
    """
    isolation()  # probe once before the threads start
    with ThreadPoolExecutor(max_workers=max(1, int(n_workers))) as pool:
        futs = [pool.submit(run_program, p, timeout_s, memory_mb, max_procs) for p in programs]
        return [f.result() for f in futs]
