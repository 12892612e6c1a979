import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fairseq_outlayers  # noqa: E402,F401  (registers models; allow-lists checkpoint classes)
from harness import DEVICE_ENV, make_corpus, preprocess  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run the slow real-data tests")
    parser.addoption("--device", choices=("cpu", "cuda"), default=None,
                     help="where the harness's fairseq-train / fairseq-generate runs go (default: cpu, or "
                     f"${DEVICE_ENV}); tests/test_cuda.py runs on CUDA whenever a GPU is present")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: real-data or long runs, skipped unless --run-slow")
    device = config.getoption("--device")
    if device:
        if device == "cuda" and not torch.cuda.is_available():
            raise pytest.UsageError("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
        os.environ[DEVICE_ENV] = device


def pytest_collection_modifyitems(config, items):
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
