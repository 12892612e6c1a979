"""Resumed and data-parallel training end exactly where one uninterrupted process ends, for every output layer,
every set of embeddings and every criterion of the package, on the CPU.

* A run stopped half-way and resumed: the same weights, buffers and optimizer state, bit for bit.
* Two gloo processes with half the batch each against one process with ``--update-freq 2``: every weight and buffer
  within float tolerance (1e-5), except where a criterion draws differently per rank (``NOT_EQUAL``, which says
  why and checks that the two still differ).

The cases are read from the registries (``registry_cases``), so a new output layer, embedding or criterion is
covered without editing this file. Each case's resume test trains 3 updates straight, then 1 update and a resume to
3, the three runs in the test process. The data-parallel test takes every case in one pair of rank processes (one
start of Python, torch and fairseq per rank, not per case), while the test process trains each case's reference.
``--update-freq 2`` makes every update two micro-batches, so the draws a criterion makes per micro-batch are
covered too. The ranks meet on a port chosen free when the test runs, and every run writes under the test's own
tmp_path, so the tests can run side by side (pytest-xdist).

The resume is in the middle of an epoch (an epoch of the tiny corpus is 4 batches, 2 updates). A run resumed from
the checkpoint saved at the end of an epoch does not continue exactly under fairseq 0.12, whatever the model: the
tied layer trained 2 + 2 updates with ``--update-freq 2`` ends 6.1e-3 away from 4 updates in one run (its third
update already scores another loss, 6.195 against 6.225), and so does fairseq's own ``--arch transformer
--share-decoder-input-output-embed`` without the plugin, to the same figures; 1 + 2 updates end bit-identical."""
import json
import os
import subprocess
import sys
import threading
import time
from typing import List, NamedTuple

import pytest
import torch

from harness import TINY_TRANSFORMER, process_env, run, tool, train_args

#: criterion options set so that the criterion draws at random on the tiny corpus: at the default ratio (25 % of
#: a 48-word vocabulary) the batch's own targets already fill the sampled vocabulary and nothing is drawn
DRAWING = {"sample_ratio": ["--sample-ratio", "0.9"]}


class Case(NamedTuple):
    layer: str
    embeddings: str
    criterion: str
    joined: bool  # the layer needs a joined dictionary

    @property
    def id(self) -> str:
        return "-".join([self.layer] + ([self.embeddings] if self.embeddings != "standard" else [])
                        + ([self.criterion] if self.criterion != "cross_entropy" else []))


def _package(obj) -> bool:
    return getattr(obj, "__module__", "").startswith("fairseq_outlayers.")


def registry_cases() -> List[Case]:
    """Every output layer with its criterions (the continuous losses for a continuous layer, cross-entropy for the
    others), every softmax-family criterion of the package on the tied layer, and every set of embeddings other
    than ``standard`` with the output layer whose options it reads (``options_from``), else the tied layer (else an
    untied softmax-type layer, for embeddings with no word matrix). Entries
    registered from outside the package (a ``--user-dir`` of a test) are left out: their subprocesses would need it."""
    import fairseq_outlayers.models  # noqa: F401  (registers everything)
    from fairseq.criterions import CRITERION_REGISTRY

    from fairseq_outlayers.core.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY, criterion_trains

    ours = {n: c for n, c in CRITERION_REGISTRY.items() if isinstance(c, type) and _package(c)}
    layers = {n: s for n, s in OUTPUT_LAYER_REGISTRY.items() if _package(s.build)}

    def trained_by(spec):  # the package's criterions for a layer that is not softmax-type, else cross-entropy
        return sorted(n for n, c in ours.items() if criterion_trains(c, spec)) if not spec.softmax_type \
            else ["cross_entropy"]

    def default_criterion(layer):
        return trained_by(layers[layer])[0]

    cases = []
    for name, spec in layers.items():
        for criterion in trained_by(spec):
            cases.append(Case(name, "standard", criterion, spec.requires_joined_dictionary))
    #: for embeddings with no word matrix: the first softmax-type layer that does not tie to the decoder embedding
    untied = sorted(n for n, s in layers.items() if s.softmax_type and not s.ties_decoder_embedding)
    softmax_criterions = {n for n, c in ours.items() if getattr(c, "softmax_type", True)}
    for criterion in sorted(softmax_criterions):
        cases.append(Case("tied", "standard", criterion, False))
    for name, spec in EMBEDDING_REGISTRY.items():
        if name != "standard" and _package(spec.build):
            layer = spec.options_from or ("tied" if not spec.no_word_matrix else untied[0])
            cases.append(Case(layer, name, default_criterion(layer), layers[layer].requires_joined_dictionary))
    return cases


def file_options(case: Case) -> dict:
    """{flag: Option} of the case's specs' options that name a file (``Option.file``, read from the registries)."""
    from fairseq_outlayers.core.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY
    from fairseq_outlayers.core.registry import file_options as of_specs

    specs = [OUTPUT_LAYER_REGISTRY[case.layer], EMBEDDING_REGISTRY[case.embeddings]]
    return {o.flag: o for o in of_specs(specs).values()}


def case_args(case: Case, files, data: str) -> List[str]:
    """The training options of a case: layer, embeddings, criterion, and the files its options name, each
    written by its ``Option.example`` for the dictionaries of ``data`` (``files(option, data)`` gives the path)."""
    args = ["--output-layer", case.layer, "--embeddings", case.embeddings, "--criterion", case.criterion,
            "--required-batch-size-multiple", "1", "--disable-validation"]  # no validation: faster, same weights
    for flag, option in sorted(file_options(case).items()):
        if option.example is None:
            pytest.fail(f"{flag} names a file (Option.file) but declares no Option.example to write a sample one")
        args += [flag, files(option, data)]
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY

    config = CRITERION_DATACLASS_REGISTRY.get(case.criterion)
    for name, option in DRAWING.items():
        if config is not None and name in getattr(config, "__dataclass_fields__", {}):
            args += option
    return args


@pytest.fixture(scope="module")
def case_files(tmp_path_factory):
    """``files(option, data)``: the sample file of a file option, written once by its ``Option.example`` for the
    dictionaries of the tiny corpus ``data``."""
    from fairseq.data import Dictionary

    folder, written = tmp_path_factory.mktemp("case_files"), {}

    def files(option, data):
        key = (option.flag, data)
        if key not in written:
            src, tgt = (Dictionary.load(os.path.join(data, f"dict.{lang}.txt")) for lang in ("de", "en"))
            written[key] = str(folder / f"{option.dest}-{len(written)}")
            option.example(src, tgt, written[key])
        return written[key]

    return files


def case_data(case: Case, tiny_bin, tiny_bin_joined) -> str:
    return tiny_bin_joined if case.joined else tiny_bin


def straight_args(case, data, save, files, max_update=3, extra=()):
    return train_args(data, save, TINY_TRANSFORMER,
                      case_args(case, files, data) + ["--update-freq", "2"] + list(extra), max_update=max_update)


def load(save: str) -> dict:
    from fairseq_outlayers.core.checkpoint_safety import read

    return read(os.path.join(save, "checkpoint_last.pt"))


def differences(a, b, where="", atol=0.0, rtol=0.0) -> List[str]:
    """Where two nested checkpoint structures (dicts, lists, tensors, numbers) differ."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        if not (torch.is_tensor(a) and torch.is_tensor(b)) or a.shape != b.shape or a.dtype != b.dtype:
            return [f"{where}: {getattr(a, 'shape', a)} vs {getattr(b, 'shape', b)}"]
        if atol == rtol == 0.0:
            same = torch.equal(a, b)
        else:
            same = torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol)
        return [] if same else [f"{where}: max |a - b| = {(a.double() - b.double()).abs().max().item():.3g}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(set(a) ^ set(b), key=str)} in one only"]
        return [d for k in a for d in differences(a[k], b[k], f"{where}.{k}", atol, rtol)]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]", atol, rtol)]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


CASES = registry_cases()

#: criterions whose data-parallel run cannot equal one process, and why; their case checks that the two differ,
#: so that a fix is noticed and the entry removed
NOT_EQUAL = {}  # none today: sampled softmax seeds each draw with the batch's index over all ranks


#: one gloo rank for every case in turn: fairseq-train's entry point on each argv of a JSON file, in one process
#: (one start of Python, torch and fairseq per rank, not per case). The process group the first case initialises
#: serves the others: fairseq's ``distributed_init`` keeps one that is initialised.
RANK_EACH = r"""
import json, sys
from fairseq_cli.train import cli_main
for case, argv in json.load(open(sys.argv[1])):
    print("CASE", case, flush=True)
    sys.argv = ["fairseq-train"] + argv
    cli_main()
"""
#: ``OUTLAYERS_TEST_CASES="a b"``: the data-parallel test takes only the cases whose id holds one of these words
#: (the adding-a-layer test runs it for its new methods only); every case by default
CASES_ENV = "OUTLAYERS_TEST_CASES"


def distributed_args(case, data, save, files, port, rank, world_size=2):
    """One rank of a gloo run started by hand (fairseq's launcher assumes CUDA), with half the batch of the
    single process's two micro-batches."""
    return train_args(data, save, TINY_TRANSFORMER, case_args(case, files, data), max_update=3) + [
        "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
        "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--distributed-world-size", str(world_size),
        "--distributed-no-spawn", "--distributed-rank", str(rank)]


def run_ranks(jobs, folder, timeout=900) -> None:
    """Two rank processes, each training every ``[case, argv]`` of its list in ``jobs`` in turn; their output goes
    to ``folder/rank-R.log``. When one rank fails, the other (waiting for it in a collective) is stopped, and the
    error names the case and ends with the failing rank's log."""
    procs, logs = [], []
    for rank, rank_jobs in enumerate(jobs):
        spec, log = os.path.join(folder, f"rank-{rank}.json"), os.path.join(folder, f"rank-{rank}.log")
        with open(spec, "w") as f:
            json.dump(rank_jobs, f)
        with open(log, "w") as out:  # a file, not a pipe: a dozen trainings' logs would fill a pipe's buffer
            procs.append(subprocess.Popen([sys.executable, "-c", RANK_EACH, spec], env=process_env(), stdout=out,
                                          stderr=subprocess.STDOUT))
        logs.append(log)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            codes = [p.poll() for p in procs]  # every rank polled (``any`` would stop at the first running one)
            if all(c == 0 for c in codes) or any(c not in (None, 0) for c in codes):
                break
            time.sleep(0.2)
    finally:
        stopped = set()
        for rank, p in enumerate(procs):
            if p.poll() is None:
                p.kill()
                p.wait()
                stopped.add(rank)
    # the rank that failed by itself first: the one stopped here only waited for it
    for rank, (p, log) in sorted(enumerate(zip(procs, logs)), key=lambda item: item[0] in stopped):
        if p.returncode != 0:
            with open(log, encoding="utf-8", errors="replace") as f:
                text = f.read()
            case = ([line.split()[1] for line in text.splitlines() if line.startswith("CASE ")] or ["?"])[-1]
            how = "stopped after the time limit" if rank in stopped else f"failed ({p.returncode})"
            raise AssertionError(f"rank {rank} {how} in case {case}:\n{text[-4000:]}")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_resume_equals_one_uninterrupted_run(case, tiny_bin, tiny_bin_joined, case_files, tmp_path):
    """3 updates straight; 1 update, then a resume to 3: every weight, buffer and Adam moment bit-identical. The
    three runs are in the test process."""
    data = case_data(case, tiny_bin, tiny_bin_joined)
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    for args in (straight_args(case, data, straight, case_files),
                 straight_args(case, data, resumed, case_files, max_update=1),
                 straight_args(case, data, resumed, case_files)):
        run([tool("outlayers-train")] + args)
    a, b = load(straight), load(resumed)
    assert a["optimizer_history"][-1]["num_updates"] == b["optimizer_history"][-1]["num_updates"] == 3
    assert b["extra_state"]["train_iterator"] == a["extra_state"]["train_iterator"]
    problems = differences(a["model"], b["model"], "model") + differences(
        a["last_optimizer_state"], b["last_optimizer_state"], "optimizer")
    assert not problems, "resume:\n" + "\n".join(problems)
    trained = [k for k, v in a["model"].items() if v.is_floating_point()]
    assert trained and a["last_optimizer_state"]["state"]  # a real comparison: weights and Adam moments exist


@pytest.mark.long(35)
def test_two_processes_equal_one_process_for_every_case(tiny_bin, tiny_bin_joined, case_files, tmp_path):
    """Every case: two gloo ranks train 3 updates with half the batch each, against one process with ``--update-freq
    2`` (run here, in the test process, while the ranks train): every weight and buffer within float tolerance."""
    from harness import free_port

    words = os.environ.get(CASES_ENV, "").split()
    cases = [c for c in CASES if not words or any(w in c.id for w in words)]
    assert cases, f"{CASES_ENV}={' '.join(words)} matches no case"
    port = free_port()  # chosen when the test runs: tests can run side by side (pytest-xdist)
    saves = {c.id: str(tmp_path / c.id) for c in cases}
    jobs = [[[c.id, distributed_args(c, case_data(c, tiny_bin, tiny_bin_joined), saves[c.id] + "-two", case_files,
                                     port, rank)] for c in cases] for rank in (0, 1)]
    failure = []

    def ranks_then_note():
        try:
            run_ranks(jobs, str(tmp_path))
        except BaseException as err:  # raised again in the test's own thread
            failure.append(err)

    ranks = threading.Thread(target=ranks_then_note)
    ranks.start()
    try:
        for c in cases:
            run([tool("outlayers-train")] + straight_args(c, case_data(c, tiny_bin, tiny_bin_joined), saves[c.id],
                                                          case_files))
    finally:
        ranks.join()
    if failure:
        raise failure[0]
    problems = {}
    for c in cases:
        a, two = load(saves[c.id]), load(saves[c.id] + "-two")
        assert a["optimizer_history"][-1]["num_updates"] == two["optimizer_history"][-1]["num_updates"] == 3, c.id
        found = differences(a["model"], two["model"], "model", atol=1e-5, rtol=1e-4)
        if c.criterion in NOT_EQUAL:
            if not found:
                problems[c.id] = [f"{c.criterion} is data-parallel-exact now: remove it from NOT_EQUAL"]
        elif found:
            problems[c.id] = found
    assert not problems, "two processes:\n" + "\n".join(f"{k}: {v}" for k, v in problems.items())


def test_the_cases_cover_every_registry_entry():
    from fairseq_outlayers.core.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY

    ids = {c.id for c in CASES}
    assert len(ids) == len(CASES)
    assert {c.layer for c in CASES} >= {n for n, s in OUTPUT_LAYER_REGISTRY.items() if _package(s.build)}
    assert {c.embeddings for c in CASES} >= {n for n, s in EMBEDDING_REGISTRY.items() if _package(s.build)}
    assert {"vmf_nll", "cosine", "l2", "max_margin", "sampled_softmax", "fused_cross_entropy"} <= {
        c.criterion for c in CASES}
