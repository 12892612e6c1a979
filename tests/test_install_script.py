"""scripts/install.sh fails early, with a clear message, on an unsupported Python or without a compiler."""
import os
import stat
import subprocess
import sys

from harness import REPO

SCRIPT = os.path.join(REPO, "scripts", "install.sh")


def _fake(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _run(tmp_path, env):
    full = {"PATH": os.environ["PATH"], "VENV": str(tmp_path / "venv"), "HOME": str(tmp_path),
            "PYTHON": sys.executable}
    full.update(env)
    return subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=full, timeout=60)


def test_rejects_unsupported_python(tmp_path):
    fake = _fake(tmp_path, "python3.9", 'echo "3.9"\n')
    proc = _run(tmp_path, {"PYTHON": fake})
    assert proc.returncode == 1
    assert "Python 3.9 is not supported" in proc.stderr and "3.10-3.12" in proc.stderr
    assert not (tmp_path / "venv").exists()  # nothing was created


def test_rejects_missing_compiler(tmp_path):
    proc = _run(tmp_path, {"CXX": "no-such-c++-compiler"})
    assert proc.returncode == 1
    assert "no C++ compiler (no-such-c++-compiler) found" in proc.stderr and "apt-get install g++" in proc.stderr
    assert not (tmp_path / "venv").exists()
