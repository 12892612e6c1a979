""".ci/run: the suite in a random order seeded from the commit, the seed printed (``make`` replaced by a program
that shows what it was given)."""
import os
import subprocess
import sys

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


def test_the_tests_run_commands_one_plain_way():
    """Commands run in the test process or as new processes (``harness.run``, ``in_process.py``): no test module
    forks the test process, serves commands over a socket or puts stand-in programs on a ``PATH``."""
    machinery = ("os." + "fork(", "fork" + "server", "SCM" + "_RIGHTS", "send" + "_fds")
    folder = os.path.join(REPO, "tests")
    found = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                text = f.read()
            found += [f"{name}: {word}" for word in machinery if word in text]
    assert not found, found


def test_the_table_of_entry_functions_is_the_installed_one():
    """``in_process.ENTRIES`` names, for each console script the tests call in this process, the function its
    installed entry point runs, and it holds every command of this package (setup.py)."""
    from importlib import metadata

    import in_process

    installed = {ep.name: ep.value for ep in metadata.entry_points(group="console_scripts")}
    assert {name: installed.get(name) for name in in_process.ENTRIES} == in_process.ENTRIES
    ours = {name for name, value in installed.items() if value.startswith("fairseq_outlayers.")}
    assert ours <= set(in_process.ENTRIES)
    assert "fairseq-hydra-train" not in in_process.ENTRIES  # Hydra's global state: a process of its own
    assert in_process.program(["fairseq-hydra-train"], "", dict(os.environ)) is None
    assert in_process.program(["outlayers-export", "--help"], "", dict(os.environ)) is not None
    # ``python -m`` this package's own __main__ (the ledger's parameter report) and its modules; not another package
    for module, here in (("fairseq_outlayers", True), ("fairseq_outlayers.tools.export", True),
                         ("fairseq_outlayers_other", False), ("sacrebleu", False)):
        assert (in_process.program([sys.executable, "-m", module, "params"], "", dict(os.environ)) is not None) == here


def test_a_user_dir_is_read_in_the_commands_own_folder(tmp_path):
    """``--user-dir`` relative to the command's working folder: a link there to this package is called in this
    process (fairseq's memo of imported folders then holds the link's path), a folder of the same name that is
    not this package starts a process."""
    import in_process
    from fairseq.utils import import_user_module

    from fairseq_outlayers import USER_DIR

    linked, other = tmp_path / "linked", tmp_path / "other"
    linked.mkdir()
    os.symlink(USER_DIR, linked / "fairseq_outlayers")
    (other / "fairseq_outlayers").mkdir(parents=True)
    cmd = ["fairseq-train", "--user-dir", "fairseq_outlayers"]
    env = dict(os.environ)
    assert in_process.program(cmd, "", env, str(linked)) is not None
    assert in_process.program(cmd, "", env, str(other)) is None
    before = dict(vars(import_user_module))
    seen = []
    done = in_process.call(lambda: seen.append(set(import_user_module.memo)), cmd, str(linked), env, 60, None)
    assert done.returncode == 0 and str(linked / "fairseq_outlayers") in seen[0]
    assert vars(import_user_module) == before  # put back after the call


def test_plain_pytest_runs_one_process_that_pdb_can_stop():
    """``pytest --pdb -p no:xdist`` works as typed: pytest.ini gives no xdist option; ``make test`` adds the
    workers."""
    import configparser

    ini = configparser.ConfigParser()
    ini.read(os.path.join(REPO, "pytest.ini"))
    assert "-n" not in ini["pytest"]["addopts"].split()
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as f:
        assert "XDIST = -n auto --dist worksteal" in f.read()


def test_the_long_tests_start_first_in_their_random_order(monkeypatch):
    """``@pytest.mark.long`` moves a test to the front, after pytest-randomly's shuffle (the hook in conftest.py): the
    others keep their random order, and so do the long ones among themselves (one process: no xdist worker count)."""
    from conftest import pytest_collection_modifyitems

    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)

    class Item:
        def __init__(self, name, long):
            self.name, self.long = name, long

        def get_closest_marker(self, name):
            return object() if name == "long" and self.long else None

        def add_marker(self, marker):
            pass

    class Config:
        @staticmethod
        def getoption(name):
            return True  # --run-slow: no skip marker added

    items = [Item("a", False), Item("b", True), Item("c", False), Item("d", True), Item("e", False)]
    pytest_collection_modifyitems(Config, items)
    assert [i.name for i in items] == ["b", "d", "a", "c", "e"]


def test_the_long_tests_are_shared_out_among_the_workers_first_slices():
    """With two workers (pytest-xdist sets ``PYTEST_XDIST_WORKER_COUNT``), worksteal first sends each worker one
    half of the items: each half starts with its share of the long tests (the heaviest to the lighter half, by
    ``@pytest.mark.long(SECONDS)``), in their random order, and the others fill both halves in their random order."""
    from conftest import worker_order

    class Marker:
        def __init__(self, seconds):
            self.args = () if seconds is None else (seconds,)

    class Item:
        def __init__(self, name, seconds=False):
            self.name, self.seconds = name, seconds

        def get_closest_marker(self, name):
            return Marker(self.seconds) if name == "long" and self.seconds is not False else None

    items = [Item("a"), Item("L1", 10), Item("b"), Item("L2", 300), Item("c"), Item("L3", None), Item("d"),
             Item("L4", 40), Item("e"), Item("f")]
    order = [i.name for i in worker_order(items, 2)]
    assert order[:5] == ["L2", "a", "b", "c", "d"] and order[5:] == ["L1", "L3", "L4", "e", "f"]
    assert [i.name for i in worker_order(items, 1)] == ["L1", "L2", "L3", "L4", "a", "b", "c", "d", "e", "f"]
    assert sorted(i.name for i in worker_order(items, 3)) == sorted(i.name for i in items)
