import os
import subprocess

import pytest
import torch

import fairseq_outlayers.models  # noqa: F401  (registers models; allow-lists checkpoint classes)
import in_process
from harness import DEVICE_ENV, make_corpus, preprocess

# One thread a test process: pytest-xdist runs one worker a core (``make test``: ``-n auto``), and the commands the
# tests start run in it (in_process.py) or beside it.
os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
torch.set_num_threads(1)
# and torch.compile without its pool of compile worker processes, one more process a core would hold
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true",
                     help="the fast tier (make test-fast): every test that starts a command (fairseq-train, a "
                     "tool, a script) is skipped; the maths, readers, option checks and registries run")
    parser.addoption("--run-slow", action="store_true", help="also run the slow tests (real data, long runs)")
    parser.addoption("--device", choices=("cpu", "cuda"), default=None,
                     help="where the harness's fairseq-train / fairseq-generate runs go (default: cpu, or "
                     f"${DEVICE_ENV}); tests/test_cuda.py runs on CUDA whenever a GPU is present")


def pytest_configure(config):
    # a person in the debugger: no watchdog ends the test process under them (in_process.call)
    in_process.DEBUGGING = bool(config.getoption("usepdb", False) or config.getoption("trace", False))
    config.addinivalue_line("markers", "slow: real-data or long runs, skipped unless --run-slow")
    config.addinivalue_line("markers", "long: a test of 20 s or more in the default suite, started first")
    device = config.getoption("--device")
    if device:
        if device == "cuda" and not torch.cuda.is_available():
            raise pytest.UsageError("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
        os.environ[DEVICE_ENV] = device


#: the weight of a ``@pytest.mark.long`` test that gives none: ``@pytest.mark.long(SECONDS)``, about its seconds on
#: an idle two-core machine beside another worker
LONG_SECONDS = 30


def long_seconds(item) -> float:
    marker = item.get_closest_marker("long")
    return float(marker.args[0]) if marker is not None and getattr(marker, "args", ()) else LONG_SECONDS


def worker_order(items, workers: int):
    """The long tests first, in the (random) order they have among themselves. With pytest-xdist's worksteal
    (``make test``), worker i is first given the i-th of ``workers`` contiguous slices of the items, and an idle
    worker later takes the end of another's queue: so the long tests are shared out among the slices' starts, each
    to the slice with the fewest seconds of long tests so far (the longest first), and every slice is filled up
    with the other tests in their random order. One worker with every long test would run them one after another
    while the other ran out of work."""
    long = [item for item in items if item.get_closest_marker("long") is not None]
    rest = [item for item in items if item.get_closest_marker("long") is None]
    if workers <= 1 or not long:
        return long + rest
    position = {id(item): i for i, item in enumerate(long)}
    shares, load = [[] for _ in range(workers)], [0.0] * workers
    for item in sorted(long, key=lambda item: -long_seconds(item)):  # stable: the random order among equals
        i = load.index(min(load))
        shares[i].append(item)
        load[i] += long_seconds(item)
    ordered, left, start = [], len(items), 0
    for i, share in enumerate(shares):
        size = left // (workers - i)  # what worksteal sends worker i first (xdist/scheduler/worksteal.py)
        share.sort(key=lambda item: position[id(item)])
        fill = rest[start:start + max(0, size - len(share))]
        start += len(fill)
        ordered += share + fill
        left -= len(share) + len(fill)
    return ordered + rest[start:]


@pytest.hookimpl(trylast=True)  # after -k / -m have deselected: the items the workers will have
def pytest_collection_modifyitems(config, items):
    # the long tests first, in the (random) order they have among themselves (pytest-randomly shuffles before this
    # hook runs), shared out among the workers (worker_order): a minute-long test started last would leave one core
    # idle while it ends
    items[:] = worker_order(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow test: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_raw(tmp_path_factory):
    return make_corpus(str(tmp_path_factory.mktemp("raw")))


@pytest.fixture(scope="session")
def tiny_bin(tiny_raw, tmp_path_factory):
    """Binarised tiny corpus with separate source/target dictionaries."""
    return preprocess(tiny_raw, str(tmp_path_factory.mktemp("bin")))


@pytest.fixture(scope="session")
def tiny_bin_joined(tiny_raw, tmp_path_factory):
    """Binarised tiny corpus with one joined dictionary."""
    return preprocess(tiny_raw, str(tmp_path_factory.mktemp("bin_joined")), joined=True)


@pytest.fixture(scope="session", autouse=True)
def ledger_cache(tmp_path_factory):
    """The ledger's kept sentence statistics (``stats_cache``) in this run's temporary folder, shared by the
    pytest-xdist workers and by the commands they start: every run starts cold, and nothing reaches ``~/.cache``."""
    from fairseq_outlayers.lab.ledger import stats_cache

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    previous = os.environ.get(stats_cache.ENV)
    os.environ[stats_cache.ENV] = str(shared / "ledger-cache")
    yield
    if previous is None:
        os.environ.pop(stats_cache.ENV, None)
    else:
        os.environ[stats_cache.ENV] = previous


@pytest.fixture(scope="session", autouse=True)
def fast_tier(request):
    """With ``--fast``, starting a command skips the test that does it (``pytest.skip`` is not an ``Exception``,
    so no handler in the code under test swallows it). Session-scoped and autouse, so it is in place before any
    other fixture (the tiny corpora run ``fairseq-preprocess``)."""
    if not request.config.getoption("--fast"):
        yield
        return
    real = subprocess.Popen

    class NoCommand(real):
        def __init__(self, args, *a, **kw):
            name = os.path.basename(str(args[0] if isinstance(args, (list, tuple)) else args).split()[0])
            pytest.skip(f"starts a command ({name}): make test runs it")

    previous = os.environ.get("OUTLAYERS_TEST_SUBPROCESS")
    os.environ["OUTLAYERS_TEST_SUBPROCESS"] = "1"  # the harness's calls become processes, and so are skipped
    subprocess.Popen = NoCommand
    try:
        yield
    finally:
        subprocess.Popen = real
        if previous is None:
            os.environ.pop("OUTLAYERS_TEST_SUBPROCESS", None)
        else:
            os.environ["OUTLAYERS_TEST_SUBPROCESS"] = previous


@pytest.fixture
def commands_in_process(monkeypatch):
    """For a test whose code under test starts commands itself (the lab's ledger and compare runners): the starter
    they take (``tools.commands.STARTER``) calls each command that ``harness.run`` would call in the test process
    there too (``in_process.popen``); the others start as processes. A test module asks for it with ``pytestmark =
    pytest.mark.usefixtures(...)``."""
    from fairseq_outlayers.tools import commands

    monkeypatch.setattr(commands, "STARTER", in_process.popen(subprocess.Popen))  # the runners' injected starter
