"""scripts/install.sh fails early, with a clear message, on an unsupported Python or without a compiler."""
import os
import stat
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize("version", ["3.9", "3.14", "3.15", "3.1"])
def test_rejects_unsupported_python(tmp_path, version):
    """Below 3.10 and above 3.13 the install stops in one line naming the range and the fix, before it creates
    anything or compiles; from 3.14 on it says why (fairseq-fixed 0.12.3.1 builds on 3.14.10, but `import fairseq`
    fails: TypeError: str | None is not callable)."""
    fake = _fake(tmp_path, f"python{version}", f'echo "{version}"\n')
    proc = _run(tmp_path, {"PYTHON": fake})
    assert proc.returncode == 1
    why = " (fairseq 0.12 does not import on it)" if version in ("3.14", "3.15") else ""
    assert proc.stderr == (f"install.sh: error: Python {version} is not supported{why}: use Python 3.10-3.13 "
                           "(set PYTHON=/path/to/python3.13)\n")
    assert not (tmp_path / "venv").exists()  # nothing was created


def test_rejects_missing_compiler(tmp_path):
    proc = _run(tmp_path, {"CXX": "no-such-c++-compiler"})
    assert proc.returncode == 1
    assert "no C++ compiler (no-such-c++-compiler) found" in proc.stderr and "apt-get install g++" in proc.stderr
    assert not (tmp_path / "venv").exists()


def _fake_venv(tmp_path, torch_version, cuda):
    """A venv whose python is the test's own, except that ``-m pip`` calls are logged instead of run, the final
    import check is skipped, and a fake ``torch`` (``torch_version``, CUDA ``cuda``) shadows the real one."""
    fakes = tmp_path / "fakes"
    (fakes / "torch").mkdir(parents=True)
    (fakes / "torch" / "__init__.py").write_text(
        f"__version__ = {torch_version!r}\nclass version:\n    cuda = {cuda!r}\n")
    dist = fakes / f"torch-{torch_version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version}\n")
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    log = tmp_path / "pip.log"
    _fake(venv_bin, "python",
          f'case "$1 $2" in "-m pip") echo "$*" >> {log}; exit 0;; esac\n'
          'if [ "$1" = "-" ] && [ $# -eq 1 ]; then cat >/dev/null; exit 0; fi\n'
          f'PYTHONPATH={fakes} exec {sys.executable} "$@"\n')
    _fake(venv_bin, "fast", "exit 0\n")
    return log


def _pip_calls(tmp_path, env, torch_version, cuda):
    log = _fake_venv(tmp_path, torch_version, cuda)
    proc = _run(tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    return proc, (log.read_text().splitlines() if log.exists() else [])


def test_keeps_an_installed_cuda_torch(tmp_path):
    proc, calls = _pip_calls(tmp_path, {}, "2.4.1+cu121", "12.1")
    assert "keeping the installed CUDA build of torch 2.4.1+cu121 (CUDA 12.1)" in proc.stdout
    assert not any("torch==2.13.0" in c for c in calls), calls
    assert all("torch==2.4.1+cu121" in c for c in calls if " install " in f" {c} " and "fastBPE" not in c
               and "cython" not in c), calls


def test_replaces_a_cpu_torch_of_another_version_with_the_pin(tmp_path):
    proc, calls = _pip_calls(tmp_path, {}, "2.4.1+cpu", None)
    assert "keeping" not in proc.stdout
    assert any(" install --quiet " in f" {c}" and c.endswith(" torch==2.13.0") for c in calls), calls


def test_too_old_cuda_torch_is_not_kept(tmp_path):
    proc, calls = _pip_calls(tmp_path, {}, "2.0.1+cu118", "11.8")
    assert "keeping" not in proc.stdout
    assert any(c.endswith("torch==2.13.0") for c in calls), calls


def test_offline_wheels_dir(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    proc, calls = _pip_calls(tmp_path, {"WHEELS": str(wheels)}, "2.4.1+cpu", None)
    assert f"offline install: every package from {wheels}" in proc.stdout
    assert calls and all(f"--no-index --find-links {wheels}" in c for c in calls), calls


def test_missing_wheels_dir_is_an_error(tmp_path):
    _fake_venv(tmp_path, "2.13.0+cpu", None)
    proc = _run(tmp_path, {"WHEELS": str(tmp_path / "nope")})
    assert proc.returncode == 1 and "is not a directory" in proc.stderr


def test_installs_with_the_versions_the_results_were_made_with(tmp_path):
    """Every pip install takes configs/constraints.txt unless CONSTRAINTS= is given; a missing file is an error."""
    pins = os.path.join(REPO, "configs", "constraints.txt")
    proc, calls = _pip_calls(tmp_path, {}, "2.13.0+cpu", None)
    installs = [c for c in calls if " install " in f" {c} "]
    assert installs and all(f"--constraint {pins}" in c for c in installs), calls
    proc, calls = _pip_calls(tmp_path / "none", {"CONSTRAINTS": ""}, "2.13.0+cpu", None)
    assert calls and not any("--constraint" in c for c in calls), calls
    _fake_venv(tmp_path / "missing", "2.13.0+cpu", None)
    proc = _run(tmp_path / "missing", {"CONSTRAINTS": str(tmp_path / "nope.txt")})
    assert proc.returncode == 1 and "set CONSTRAINTS= to install without pins" in proc.stderr


def test_the_pinned_sacrebleu_is_the_one_in_the_committed_records():
    """The ledger's scores carry sacreBLEU's signature: the pin must be the version that signed them (a pin moved
    without re-scoring would make the tables unreproducible from a fresh install)."""
    import glob
    import json
    import re

    pinned = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^;\s]+)", open(os.path.join(REPO, "configs", "constraints.txt"))
                             .read(), re.M))
    assert {"gensim", "numpy", "scipy", "sacrebleu", "sacremoses", "systran-align"} <= set(pinned)
    versions = set()
    for path in glob.glob(os.path.join(REPO, "docs", "results", "runs", "*.json")):
        for scores in json.load(open(path, encoding="utf-8"))["test"].values():
            versions.add(scores["sacrebleu_signature"].rsplit("version:", 1)[1])
    assert versions == {pinned["sacrebleu"]}


def _supported_by_install_sh():
    import re

    return re.search(r'^PY_SUPPORTED="([^"]+)"$', open(SCRIPT).read(), re.M).group(1).split()


def test_python_requires_and_install_sh_accept_the_same_pythons():
    """setup.py's python_requires (pip) and install.sh's PY_SUPPORTED (make install) name the same Pythons,
    3.10 to 3.13; the docs' range says the same."""
    import ast

    from packaging.specifiers import SpecifierSet

    tree = ast.parse(open(os.path.join(REPO, "setup.py")).read())
    spec = SpecifierSet(next(node.value.value for node in ast.walk(tree)
                             if isinstance(node, ast.keyword) and node.arg == "python_requires"))
    candidates = [f"3.{minor}" for minor in range(6, 20)]
    accepted = [v for v in candidates if spec.contains(f"{v}.0")]
    assert accepted == _supported_by_install_sh() == ["3.10", "3.11", "3.12", "3.13"]
    for doc in ("README.md", os.path.join("docs", "install.md")):
        assert "Python 3.10-3.13" in open(os.path.join(REPO, doc), encoding="utf-8").read(), doc


def test_the_running_python_is_accepted():
    """The suite's own Python (3.11 in CI, 3.13 where it was built with make install PYTHON=python3.13)."""
    assert "%d.%d" % sys.version_info[:2] in _supported_by_install_sh()


def test_torch_index_is_used_for_the_torch_step_only(tmp_path):
    """TORCH_INDEX=URL: the torch step gets --index-url URL (a version pin does not choose the build; PyPI's torch
    for Linux x86_64 is the CUDA build); no other step sees the index. TORCH_EXTRA_INDEX: --extra-index-url."""
    url = "https://download.pytorch.org/whl/cpu"
    for var, flag in (("TORCH_INDEX", "--index-url"), ("TORCH_EXTRA_INDEX", "--extra-index-url")):
        proc, calls = _pip_calls(tmp_path / var, {var: url}, "2.4.1+cpu", None)
        torch_steps = [c for c in calls if c.endswith(" torch==2.13.0") and "fairseq" not in c and " -e " not in c]
        assert len(torch_steps) == 1 and f"{flag} {url} torch==2.13.0" in torch_steps[0], calls
        assert all(url not in c for c in calls if c not in torch_steps), calls
        assert f"installing torch==2.13.0 from {flag} {url}" in proc.stdout
    proc, calls = _pip_calls(tmp_path / "pypi", {}, "2.4.1+cpu", None)
    assert "from PyPI on Linux x86_64 this is the CUDA build" in proc.stdout
    assert not any("index-url" in c for c in calls), calls


def test_torch_index_errors(tmp_path):
    _fake_venv(tmp_path, "2.4.1+cpu", None)
    proc = _run(tmp_path, {"TORCH_INDEX": "a", "TORCH_EXTRA_INDEX": "b"})
    assert proc.returncode == 1 and "set TORCH_INDEX or TORCH_EXTRA_INDEX, not both" in proc.stderr
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    proc = _run(tmp_path, {"TORCH_INDEX": "a", "WHEELS": str(wheels)})
    assert proc.returncode == 1 and "cannot be used with WHEELS" in proc.stderr


def test_make_install_passes_the_torch_index():
    makefile = open(os.path.join(REPO, "Makefile")).read()
    assert "TORCH_INDEX=$(TORCH_INDEX)" in makefile and "TORCH_EXTRA_INDEX=$(TORCH_EXTRA_INDEX)" in makefile


def test_python_312_installs_without_systran_align():
    """systran-align has no build (wheel or source) for Python 3.12: the extras that name it carry a marker, the
    install's final check imports it only below 3.12, and the offline download leaves it out for 3.12."""
    import ast

    tree = ast.parse(open(os.path.join(REPO, "setup.py")).read())
    marker = next(node.value.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", None) == "SYSTRAN_ALIGN" for t in node.targets))
    assert marker == 'systran-align; python_version < "3.12"'
    from packaging.requirements import Requirement

    req = Requirement(marker)
    assert req.marker.evaluate({"python_version": "3.11"}) and not req.marker.evaluate({"python_version": "3.12"})
    setup = open(os.path.join(REPO, "setup.py")).read()
    assert '"align": [SYSTRAN_ALIGN]' in setup and "SYSTRAN_ALIGN, \"gensim" in setup
    assert "systran-align\"" not in setup.split("extras_require", 1)[1].split("entry_points", 1)[0]
    script = open(SCRIPT).read()
    assert "if sys.version_info < (3, 12):\n    import systran_align" in script
    wheels = open(os.path.join(REPO, "scripts", "download_wheels.sh")).read()
    assert 'case "$PYVER" in 3.10|3.11) align=(systran-align);; esac' in wheels


@pytest.mark.parametrize("pyver", ["3.12", "3.13"])
def test_download_wheels_fetches_what_an_offline_install_of_that_python_needs(tmp_path, pyver):
    """scripts/download_wheels.sh (pip logged, not run): torch 2.13's manylinux_2_28 wheels are within the default
    platform tags; hydra's antlr4 parser, published as a source archive only, is built into a wheel first and found
    by the binary downloads; fairseq-fixed is a wheel up to 3.12 and its source archive (with its requirements as
    wheels) on 3.13; the test extras are there for `-e .[test,...]`."""
    log = tmp_path / "pip.log"
    python = _fake(tmp_path, "python", f'echo "$*" >> {log}\n')
    wheels = tmp_path / "wheels"
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "download_wheels.sh"), str(wheels), pyver],
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"], "PYTHON": python},
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("-m pip wheel") and "antlr4-python3-runtime==4.9.3" in calls[0]
    binary = [c for c in calls if "--only-binary=:all:" in c]
    tags = ("manylinux_2_28_x86_64", "manylinux_2_18_x86_64", "manylinux2014_x86_64")  # torch, nccl, older ones
    assert binary and all(f"--python-version {pyver}" in c and all(f"--platform {t}" in c for t in tags)
                          and f"--find-links {wheels}" in c for c in binary), calls
    source = [c for c in calls if "--no-binary" in c]
    if pyver == "3.12":
        assert any(" fairseq-fixed==0.12.3.1" in c for c in binary)
        assert not any("fairseq-fixed" in c for c in source)
    else:
        assert not any("fairseq-fixed" in c for c in binary)
        assert any(c.endswith(" fairseq-fixed==0.12.3.1") for c in source)
        assert any("hydra-core==1.3.2" in c and "omegaconf==2.3.0" in c for c in binary)
    everything = " ".join(binary)
    for extra in ("pytest-xdist", "pytest-randomly", "coverage", "hypothesis", "ctranslate2", "faiss-cpu"):
        assert extra in everything, extra
    assert ("systran-align" in everything) == (pyver in ("3.10", "3.11"))
