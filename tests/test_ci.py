""".ci/run: the suite in a random order seeded from the commit, the seed printed (``make`` replaced by a program
that shows what it was given)."""
import os
import subprocess

from harness import REPO


def test_the_suite_runs_in_an_order_seeded_from_the_commit(tmp_path):
    make = tmp_path / "make"
    make.write_text('#!/bin/sh\necho "make $* PYTEST_ADDOPTS=$PYTEST_ADDOPTS"\n')
    make.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(["bash", os.path.join(REPO, ".ci", "run")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    seed = int(commit[:8], 16)
    assert proc.stdout.splitlines() == [
        f"test order: -p randomly --randomly-seed {seed} (commit {commit[:12]})",
        f"make test PYTEST_ADDOPTS=-p randomly --randomly-seed {seed} "]
