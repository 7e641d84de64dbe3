"""The code sandbox: canonical HumanEval solutions pass, empty bodies fail, hostile programs are contained."""

from __future__ import annotations

import os
import secrets
import time

import pytest

from relaxspec.tasks import build_task, sandbox
from relaxspec.tasks.humaneval import build_program
from relaxspec.tasks.sandbox import isolation, run_many, run_program

OK = "assert sum([1, 2, 3]) == 6\n"


@pytest.fixture(scope="module")
def problems():
    return build_task({"name": "humaneval", "seed": None, "path": None}).examples()


def _check_then_ok(res, statuses, reason_part=""):
    assert not res.passed
    assert res.status in statuses, res
    assert reason_part in res.reason, res
    assert run_program(OK, timeout_s=5).passed  # the harness keeps working afterwards


def _subset(problems, n):
    return problems[:: max(1, len(problems) // n)][:n]


def _canonical(problems):
    return [build_program(p, p["prompt"] + p["canonical_solution"]) for p in problems]


def test_canonical_all_pass(problems):
    """All 164 canonical solutions pass (about 17 s on 2 cores in namespace mode)."""
    assert len(problems) == 164
    t = time.perf_counter()
    res = run_many(_canonical(problems), n_workers=2)
    bad = [(p["id"], r.status, r.reason) for p, r in zip(problems, res, strict=True) if not r.passed]
    assert not bad
    assert time.perf_counter() - t < 90


def test_empty_bodies_fail(problems):
    subset = _subset(problems, 20)
    for body in ("    pass\n", "    return None\n"):
        res = run_many([build_program(p, p["prompt"] + body) for p in subset], n_workers=2)
        assert not any(r.passed for r in res)
        assert all(r.status == "failed" for r in res)


def test_syntax_error_and_early_exit():
    _check_then_ok(run_program("def f(:\n  pass"), {"failed"}, "SyntaxError")
    _check_then_ok(run_program("import sys\nsys.exit(0)\nassert False"), {"failed"}, "exited before")
    _check_then_ok(run_program("import os\nos._exit(0)"), {"failed"})


def test_infinite_loop_times_out():
    t = time.perf_counter()
    res = run_program("while True:\n    pass\n", timeout_s=1.5)
    assert time.perf_counter() - t < 10
    _check_then_ok(res, {"timeout"}, "timeout")


def test_fork_bomb_contained():
    res = run_program("import os\nwhile True:\n    os.fork()\n", timeout_s=3)
    _check_then_ok(res, {"failed", "timeout"})


def test_huge_allocation():
    _check_then_ok(run_program("x = bytearray(10 * 1024**3)\n", timeout_s=5), {"memory"}, "MemoryError")


@pytest.mark.parametrize("target", ["/tmp/escape_{}", "~/escape_{}", "/work/escape_{}"])
def test_write_outside_refused(target):
    path = os.path.expanduser(target.format(secrets.token_hex(4)))
    res = run_program(f"open({path!r}, 'w').write('pwned')\n")
    assert not os.path.exists(path)
    _check_then_ok(res, {"failed"})


def test_write_inside_workdir_allowed_and_cleaned():
    res = run_program("import os\nopen('out.txt', 'w').write('ok')\nprint(os.getcwd())\n")
    assert res.passed, res
    assert not os.path.exists(res.stdout.strip())


def test_scrubbed_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    res = run_program("import os\nassert 'OPENAI_API_KEY' not in os.environ, dict(os.environ)\n"
                      "assert set(os.environ) <= {'PATH', 'LANG', 'HOME', 'LC_CTYPE'}, dict(os.environ)\n")
    assert res.passed, res


@pytest.mark.parametrize("addr", [("127.0.0.1", 8), ("1.1.1.1", 80)])
def test_socket_connect_blocked(addr):
    code = f"import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect({addr!r})\n"
    _check_then_ok(run_program(code, timeout_s=5), {"failed", "timeout"})


_BYPASS = """import subprocess, sys
r = subprocess.run([sys.executable, "-c", {code!r}], capture_output=True, text=True)
print(r.returncode, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "")
"""


@pytest.mark.skipif(isolation()["mode"] != "namespace", reason="kernel-level isolation needs root + unshare")
def test_kernel_layers_without_audit_hook():
    """A child interpreter has no audit hook: the namespaces alone must stop it."""
    for addr in (("127.0.0.1", 8), ("1.1.1.1", 80)):
        res = run_program(_BYPASS.format(code=f"import socket; socket.create_connection({addr!r}, 2)"))
        assert "unreachable" in res.stdout or "refused" in res.stdout, res
    name = f"escape_{secrets.token_hex(4)}"
    res = run_program(_BYPASS.format(code=f"open('/work/{name}', 'w').write('x')"))
    assert "Read-only file system" in res.stdout and not os.path.exists(f"/work/{name}")
    res = run_program(_BYPASS.format(code=f"open('/tmp/{name}', 'w').write('x')"))
    assert not os.path.exists(f"/tmp/{name}")  # landed in the namespace's private tmpfs
    res = run_program(_BYPASS.format(code="import os\n[os.fork() or os._exit(0) for _ in range(40)]"))
    assert "Resource temporarily unavailable" in res.stdout, res


def test_humaneval_task_scoring(problems):
    task = build_task({"name": "humaneval", "timeout_s": 5})
    p = problems[0]
    fenced = f"Here you go:\n```python\n{p['prompt']}{p['canonical_solution']}\n```\nDone."
    body_only = f"```python\n{p['canonical_solution']}\n```"
    wrong = f"```python\ndef {p['entry_point']}(*a):\n    return None\n```"
    out = task.score_many([p, p, p], [[fenced], [body_only], [wrong]])
    assert [o["pass@1"] for o in out] == [1.0, 1.0, 0.0]
    assert task.aggregate(out)["pass@1"] == pytest.approx(2 / 3)
    raw = build_task({"name": "humaneval", "prompt_style": "completion"})
    assert not raw.chat and "\ndef " in raw.stop and raw.raw_prompt(p) == p["prompt"]
    junk = p["canonical_solution"] + "\n\nprint(undefined_name)\n"
    assert raw.score(p, [junk])["pass@1"] == 1.0  # cut at "\nprint("


@pytest.fixture
def fallback_mode(monkeypatch):
    """Force the no-namespace fallback (audit hook + rlimits only)."""
    monkeypatch.setattr(sandbox, "_namespace_ok", lambda: False)
    isolation.cache_clear()
    yield
    monkeypatch.undo()
    isolation.cache_clear()


def test_fallback_mode_contains(fallback_mode, problems):
    assert isolation()["mode"] == "fallback"
    p = problems[1]
    assert run_program(build_program(p, p["prompt"] + p["canonical_solution"])).passed
    name = f"/tmp/escape_{secrets.token_hex(4)}"
    hostile = [
        f"open({name!r}, 'w').write('x')",
        "import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', 8))",
        "import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('1.1.1.1', 80))",
        "import os\nwhile True:\n    os.fork()",
        "x = bytearray(10 * 1024**3)",
        "import ctypes\nctypes.CDLL(None)",
    ]
    for code in hostile:
        res = run_program(code, timeout_s=3)
        assert not res.passed and res.reason, (code, res)
    assert not os.path.exists(name)
    assert run_program("while True:\n    pass", timeout_s=1).status == "timeout"
    assert run_program(OK).passed
