"""tests/forkserver.py: the stand-ins a shell script of the tests finds first on its PATH. A command a fork can run
is served by one (it has the test process's modules: ``_pytest`` is imported there, never in a new Python), with
the script's argv, environment, working directory, standard streams and exit status; anything else runs the real
program. Signals reach the served command, and a stand-in killed takes its command with it."""
import os
import signal
import subprocess
import sys
import time

import forkserver
import pytest
from harness import BIN, REPO

FORKED = "import sys; print('_pytest' in sys.modules)"


@pytest.fixture
def env():
    full = dict(os.environ)
    served = forkserver.environment(full)
    if not served:
        pytest.skip("every command starts afresh here (--fast or OUTLAYERS_TEST_SUBPROCESS=1)")
    full.update(served)
    return full


def stand_in(env, name):
    return os.path.join(env["VENV_BIN"], name)


def test_the_stand_ins_lead_the_path_and_link_every_other_program(env):
    assert env["PATH"].split(os.pathsep)[:2] == [env["VENV_BIN"], BIN]
    names = set(os.listdir(env["VENV_BIN"]))  # the venv's programs when the server started
    assert {"python", "fairseq-train", "outlayers-train", "sacremoses", "pip"} <= names <= set(os.listdir(BIN))
    assert not os.path.islink(stand_in(env, "python")) and not os.path.islink(stand_in(env, "fairseq-train"))
    assert os.path.realpath(stand_in(env, "pip")) == os.path.realpath(os.path.join(BIN, "pip"))
    with open(stand_in(env, "fairseq-train"), encoding="utf-8") as f:
        assert f.readline() == f"#!{os.path.abspath(sys.executable)} -IS\n"


def test_a_script_s_python_commands_are_served_by_forks(env, tmp_path):
    script = tmp_path / "s.sh"
    script.write_text("set -e\npython -c \"$1\"\ncd \"$2\"\necho hello | python -c 'import os, sys; "
                      "print(sys.stdin.read().strip(), os.getcwd(), os.environ[\"MARK\"], sys.argv[1:])' a b\n"
                      "python -m fairseq_outlayers options | head -1\n"
                      "fairseq-train --help | head -1\n"
                      "set +e\npython -c 'import sys; sys.exit(7)'\necho \"status $?\"\n"
                      "python -c 'raise ValueError(\"boom\")'\necho \"status $?\"\n")
    proc = subprocess.run(["bash", str(script), FORKED, str(tmp_path)], env=dict(env, MARK="m1"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "True"  # a fork
    assert lines[1] == f"hello {tmp_path} m1 ['a', 'b']"
    assert lines[2].startswith("== Seams") and lines[3].startswith("usage: fairseq-train")
    assert lines[4:] == ["status 7", "status 1"]
    assert "ValueError: boom" in proc.stderr


def test_what_a_fork_cannot_run_runs_the_real_program(env):
    real = [stand_in(env, "python"), "-I", "-c", FORKED]  # an option before -c: not one of the forms a fork runs
    assert subprocess.run(real, env=env, capture_output=True, text=True).stdout == "False\n"
    other = subprocess.run([stand_in(env, "python"), "-c", FORKED], env=dict(env, PYTHONPATH="/elsewhere"),
                           capture_output=True, text=True)
    assert other.stdout == "False\n"  # a PYTHONPATH that changes imports
    package = subprocess.run([stand_in(env, "python"), "-c", FORKED], env=dict(env, PYTHONPATH=REPO),
                             capture_output=True, text=True)
    assert package.stdout == "True\n"  # the package's own folder changes nothing
    fresh = subprocess.run([stand_in(env, "python"), "-c", FORKED], env=dict(env, OUTLAYERS_TEST_SUBPROCESS="1"),
                           capture_output=True, text=True)
    assert fresh.stdout == "False\n"
    alone = dict(env)
    alone.pop(forkserver.ADDRESS_ENV)
    assert subprocess.run([stand_in(env, "python"), "-c", FORKED], env=alone, capture_output=True,
                          text=True).stdout == "False\n"


def sleeper(env, tmp_path):
    pid_file = tmp_path / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    proc = subprocess.Popen([stand_in(env, "python"), "-c", code], env=env)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    return proc, int(pid_file.read_text())


def gone(pid, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def test_a_signal_reaches_the_command_and_its_status_comes_back(env, tmp_path):
    proc, child = sleeper(env, tmp_path)
    assert child != proc.pid
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert gone(child)


def test_a_killed_stand_in_takes_its_command_with_it(env, tmp_path):
    proc, child = sleeper(env, tmp_path)
    proc.kill()
    proc.wait(timeout=30)
    assert gone(child)
