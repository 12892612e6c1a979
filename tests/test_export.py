"""``outlayers-export``: every output layer and embedding that the registries declare exportable translates the
same without the package.

For each case a tiny model is trained through ``fairseq-train --user-dir``; the package's ``fairseq-generate`` is
the reference. The export ``--to fairseq`` is translated by stock ``fairseq-generate`` in a new Python that never
imports the package (same hypotheses, scores within 1e-4, beam 1 and 5); the export ``--to ctranslate2`` by
CTranslate2 (same hypotheses, beam 1 and 5). The cases are read from the registries, so a new exportable layer is
tested here with no change to this file (its extra options, if it needs some to be exportable, go in ``OPTIONS``).
"""
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import List

import pytest
import torch

import fairseq_outlayers.models  # noqa: F401  (registers the seams)
from fairseq_outlayers.errors import ExportRefused, OutlayersConfigError
from fairseq_outlayers.core.registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY
from fairseq_outlayers.tools import export as exporter
from harness import (BIN, TINY_LSTM, TINY_TRANSFORMER, build_model, generate, pairing_file, run, tool, train)

#: options that make a layer exportable or its export non-trivial (a projection and a scale to fold)
OPTIONS = {
    "fixed": ["--fixed-targets-dim", "16", "--fixed-targets-learned-scale"],
    "joint": ["--joint-structure", "bilinear", "--joint-no-word-bias"],
}
UPDATES = 40
BEAMS = (1, 5)
#: the test split in one batch, hypotheses of at most 1.2 x its longest source + 10 words (the package's own limit)
LIMITS = ["--batch-size", "24", "--max-len-a", "1.2", "--max-len-b", "10"]


@dataclass
class Case:
    layer: str
    embeddings: str = "standard"
    arch: List[str] = field(default_factory=lambda: list(TINY_TRANSFORMER))
    extra: List[str] = field(default_factory=list)
    fairseq: bool = True  # stock fairseq holds it (its Transformer has no output bias: CTranslate2 only); a layer
    # added later whose export gives a per-word bias is found from the trained model (``_stock_takes``)

    @property
    def name(self):
        arch = "lstm" if self.arch[1] == "outlayers_lstm" else "transformer"
        return "-".join([arch, self.layer, self.embeddings] + [o.lstrip("-") for o in self.extra if o != "FILE"])


def _ours(registry):
    return {name: spec for name, spec in registry.items() if spec.build.__module__.startswith("fairseq_outlayers.")}


def export_cases() -> List[Case]:
    """One case per exportable output layer (standard embeddings) and per exportable embedding (with a tied
    layer), read from the registries; the LSTM with a tied layer, and with an output bias and dot attention."""
    cases = [Case(name, extra=OPTIONS.get(name, [])) for name, spec in sorted(_ours(OUTPUT_LAYER_REGISTRY).items())
             if callable(spec.export)]
    for name, spec in sorted(_ours(EMBEDDING_REGISTRY).items()):
        if callable(spec.export) and name != "standard":
            # an embedding without a word matrix cannot be tied to: the untied softmax reads it
            layer = "softmax" if spec.no_word_matrix else "tied"
            cases.append(Case(layer, name, extra=["FILE"]))
    cases += [Case("tied", arch=list(TINY_LSTM)),
              Case("softmax", arch=list(TINY_LSTM), extra=["--output-bias", "--attention-type", "dot"])]
    return cases


CASES = export_cases()
#: the package's own output layers that stock fairseq holds as their cases train them (no per-word bias): a layer
#: added later may give one, and its case then goes to CTranslate2 only (``_stock_takes``)
PACKAGE_LAYERS = {"fixed", "joint", "softmax", "tied", "tied-all"}


def _files(case: Case, tmp_path, raw: str, bin_dir: str) -> List[str]:
    """The options of the file an embedding reads (a pairing, target vectors), made for the tiny corpus."""
    if "FILE" not in case.extra:
        return case.extra
    spec = EMBEDDING_REGISTRY[case.embeddings]
    if spec.options_from:  # the vectors of the output layer it borrows its options from
        from fairseq_outlayers.tools.vectors import write_random_vectors

        path = str(tmp_path / "vectors.vec")
        write_random_vectors(os.path.join(bin_dir, "dict.en.txt"), path, 16, 1, False)
        return [o for o in case.extra if o != "FILE"] + ["--target-vectors", path]
    return [o for o in case.extra if o != "FILE"] + ["--pairing", pairing_file(raw, bin_dir, str(tmp_path / "p"))]


def _hypotheses(path: str):
    """{id: (score, tokens)} of a fairseq-generate results file."""
    found = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("H-"):
                key, score, tokens = line.rstrip("\n").split("\t")
                found[int(key[2:])] = (float(score), tokens)
    return found


#: stock fairseq-generate, once per argv, in a Python that must never import the package
STOCK = r"""
import json, sys
from fairseq import options
from fairseq_cli import generate
for argv in json.loads(sys.argv[1]):
    generate.main(options.parse_args_and_arch(options.get_generation_parser(), argv))
assert not [m for m in sys.modules if m.startswith("fairseq_outlayers")], "stock fairseq imported the package"
"""


def stock_generate(runs):
    """Each argv of ``runs`` by stock fairseq-generate in one new Python (no --user-dir, weights-only loading)."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", STOCK, json.dumps(runs)], env=env, cwd=BIN, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _stock_takes(checkpoint: str) -> bool:
    """Whether stock fairseq's twin holds the trained model's output layer: not when the layer's export gives a
    per-word bias and the twin has none (a Transformer); ``--to ctranslate2`` holds such a bias."""
    from fairseq_outlayers.tools.stock import family_of, seam_tensors

    model, args, _task, _state = exporter.load(checkpoint)
    return seam_tensors(model.eval(), args)["bias"] is None or family_of(model).output_bias


def _exported(case: Case, tiny_raw, tiny_bin, tiny_bin_joined, tmp_path):
    """Train the case, export it both ways, translate it with the package: (data, the package's hypotheses by
    beam, the stock runs to make, the CTranslate2 model or None)."""
    tmp_path.mkdir()
    spec = OUTPUT_LAYER_REGISTRY[case.layer]
    data = tiny_bin_joined if spec.requires_joined_dictionary else tiny_bin
    extra = ["--output-layer", case.layer, "--embeddings", case.embeddings] + _files(case, tmp_path, tiny_raw, data)
    save = str(tmp_path / "ck")
    train(data, save, arch_args=case.arch, extra=extra, max_update=UPDATES)
    checkpoint = os.path.join(save, "checkpoint_last.pt")
    stock_dir = str(tmp_path / "stock")
    stock = _stock_takes(checkpoint)  # a new layer with a per-word bias (a prior, say) goes to CTranslate2 only
    assert stock or not case.fairseq or case.layer not in PACKAGE_LAYERS, f"{case.name} exports a per-word bias"
    assert not stock or case.fairseq, f"{case.name}: stock fairseq would hold it"
    if stock:
        exporter.export(checkpoint, stock_dir, "fairseq")
        assert sorted(os.listdir(stock_dir)) == ["dict.de.txt", "dict.en.txt", "model.pt"]
    else:
        with pytest.raises(ExportRefused, match="Transformer output projection has no bias.*--to ctranslate2$"):
            exporter.export(checkpoint, stock_dir, "fairseq")
    runs, ours = [], {}
    for beam in BEAMS:
        results = str(tmp_path / f"ours{beam}")
        generate(data, checkpoint, extra=["--beam", str(beam), "--results-path", results] + LIMITS)
        ours[beam] = _hypotheses(os.path.join(results, "generate-test.txt"))
        if stock:
            runs.append([data, "--path", os.path.join(stock_dir, "model.pt"), "--beam", str(beam), "--cpu",
                         "--num-workers", "0", "--results-path", str(tmp_path / f"stock{beam}")] + LIMITS)
    ct2_dir = str(tmp_path / "ct2") if case.arch[1] != "outlayers_lstm" else None  # CTranslate2 has no fairseq LSTM
    return ours, runs, ct2_dir, checkpoint


#: CTranslate2 translates in a new Python: its thread pools stay out of the test process, which runs fairseq's
#: programs of later tests
CT2 = r"""
import json, sys
import ctranslate2
from fairseq_outlayers.tools.export import export

job = json.load(open(sys.argv[1]))
source = [line.split() for line in open(job["source"], encoding="utf-8")]
longest = max(len(words) for words in source) + 1  # fairseq counts the end-of-sentence token
found = {}
for name, case in job["cases"].items():
    export(case["checkpoint"], case["out"], "ctranslate2")
    translator = ctranslate2.Translator(case["out"], device="cpu", intra_threads=1)
    found[name] = {}
    for beam, ours in case["ours"].items():
        # fairseq-generate --max-len-a 1.2 --max-len-b 10 on one batch: at most 1.2 x its longest source + 10 words
        limit = int(1.2 * longest + 10)
        results = translator.translate_batch(source, beam_size=int(beam), max_decoding_length=limit)
        got = [" ".join(r.hypotheses[0]) for r in results]
        rows = []
        for key, theirs in enumerate(got):
            mine = ours[str(key)]
            if theirs == mine:
                rows.append([key, theirs, None])
                continue
            if max(len(mine.split()), len(theirs.split())) >= limit - 1:  # cut by the length limit, which the
                rows.append([key, theirs, 0.0])  # two programs may apply a word apart: not a search result
                continue
            a, b = (r.log_probs for r in translator.score_batch([source[key]] * 2, [mine.split(), theirs.split()]))
            if int(beam) > 1:  # the two hypotheses' length-normalised scores
                gap = abs(sum(a) / len(a) - sum(b) / len(b))
            else:  # greedy: the two words where they part
                first = next(i for i, (x, y) in enumerate(zip(mine.split() + ["</s>"], theirs.split() + ["</s>"]))
                             if x != y)
                gap = abs(a[first] - b[first])
            rows.append([key, theirs, gap])
        found[name][beam] = rows
json.dump(found, open(sys.argv[2], "w"))
"""

#: how close two candidates' log-probabilities (natural log) must be for either to be a correct search result: a
#: near-tie that another implementation's rounding may order either way (greedy search), or that CTranslate2's beam
#: search, which stops under its own rule, may settle the other way on these barely trained models (beam search;
#: on the serving page's Multi30k models, 800 updates each, 999 or 1,000 of 1,000 of its float32 hypotheses are the
#: package's: docs/serving.md)
NEAR_TIE = {1: 1e-3, 5: 1e-2}


def ctranslate2_runs(jobs, source: str, tmp_path):
    """{case: {beam: [[sentence id, CTranslate2's hypothesis, None or the gap of a difference]]}}: each case
    exported to CTranslate2 and translated at every beam, in one new Python. The gap of a difference is between
    the package's and CTranslate2's choice, both scored by CTranslate2 (whose log-probabilities are the package's to
    1e-6, as the export checks): at the first word where they part for greedy search, the length-normalised
    scores for beam search."""
    path, out = str(tmp_path / "ct2-job.json"), str(tmp_path / "ct2-found.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"source": source, "cases": jobs}, f)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", CT2, path, out], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def _check(cases, made, tmp_path, tiny_raw) -> int:
    """The stock runs give the package's hypotheses and scores; CTranslate2 its hypotheses, near-ties aside.
    Returns the near-ties, each named by its case, beam and sentence."""
    wrong, jobs = [], {}
    for case in cases:
        ours, stock_runs, ct2_dir, _ = made[case.name]
        for beam in BEAMS if stock_runs else ():  # stock fairseq ran the case
            theirs = _hypotheses(str(tmp_path / case.name / f"stock{beam}" / "generate-test.txt"))
            assert len(ours[beam]) == 24 and theirs.keys() == ours[beam].keys(), case.name
            for key, (score, tokens) in ours[beam].items():
                if theirs[key][1] != tokens or abs(theirs[key][0] - score) > 1e-4:
                    wrong.append(f"{case.name}, beam {beam}, sentence {key}: stock {theirs[key]}, ours "
                                 f"{(score, tokens)}")
        if ct2_dir is not None:
            jobs[case.name] = {"checkpoint": made[case.name][3], "out": ct2_dir,
                               "ours": {beam: {key: tokens for key, (_, tokens) in ours[beam].items()}
                                        for beam in BEAMS}}
    ties = []
    for name, beams in ctranslate2_runs(jobs, os.path.join(tiny_raw, "test.de"), tmp_path).items():
        for beam, rows in beams.items():
            for key, theirs, gap in rows:
                if gap is None:
                    continue
                named = (f"{name}, beam {beam}, sentence {key}: CTranslate2 {theirs!r}, ours "
                         f"{jobs[name]['ours'][int(beam)][key]!r} (log-probabilities {gap:.2g} apart)")
                (wrong if gap > NEAR_TIE[int(beam)] else ties).append(named)
    assert wrong == []
    print("near-ties:", *ties, sep="\n  ")  # shown with pytest -s or -rP
    return ties


def _run_cases(cases, tiny_raw, tiny_bin, tiny_bin_joined, tmp_path):
    """Every case trained, exported and translated; stock fairseq and CTranslate2 started once for all of them."""
    made, runs = {}, []
    for case in cases:
        made[case.name] = _exported(case, tiny_raw, tiny_bin, tiny_bin_joined, tmp_path / case.name)
        runs += made[case.name][1]
    if runs:
        stock_generate(runs)
    ties = _check(cases, made, tmp_path, tiny_raw)
    assert len(ties) <= 2 * len(cases), ties  # near-ties are rare: at most one in 24 sentences at each beam


# two tests, so that two workers share the cases; stock fairseq starts once in each
LAYER_CASES = [c for c in CASES if c.embeddings == "standard" and c.arch[1] != "outlayers_lstm"]
OTHER_CASES = [c for c in CASES if c not in LAYER_CASES]
#: Transformers with a per-word output bias, which CTranslate2's output projection holds and stock fairseq's does not
BIAS_CASES = [Case("softmax", extra=["--output-bias"], fairseq=False),
              Case("joint", extra=["--joint-activation", "identity"], fairseq=False)]


@pytest.mark.long(55)
def test_every_exportable_output_layer_translates_as_the_package_does(tiny_raw, tiny_bin, tiny_bin_joined, tmp_path):
    assert {c.layer for c in LAYER_CASES} == {name for name, spec in _ours(OUTPUT_LAYER_REGISTRY).items()
                                             if callable(spec.export)}
    _run_cases(LAYER_CASES, tiny_raw, tiny_bin, tiny_bin_joined, tmp_path)


@pytest.mark.long(40)
def test_every_exportable_embedding_and_the_lstm_translate_as_the_package_does(tiny_raw, tiny_bin, tiny_bin_joined,
                                                                               tmp_path):
    _run_cases(OTHER_CASES, tiny_raw, tiny_bin, tiny_bin_joined, tmp_path)


@pytest.mark.long(20)
def test_ctranslate2_translates_layers_with_an_output_bias_as_the_package_does(tiny_raw, tiny_bin, tiny_bin_joined,
                                                                               tmp_path):
    """--output-bias, and the joint layer with --joint-activation identity (its context's offset becomes a per-word
    bias): stock fairseq refuses them, CTranslate2 gives the package's hypotheses at beam 1 and 5 (near-ties
    named)."""
    _run_cases(BIAS_CASES, tiny_raw, tiny_bin, tiny_bin_joined, tmp_path)


def test_the_int8_export_stores_int8_weights(tiny_bin, tmp_path):
    """--quantization reaches CTranslate2's converter: the model loads with int8 weights (looked at in a new
    Python, as every CTranslate2 run of these tests)."""
    save = str(tmp_path / "ck")
    train(tiny_bin, save, extra=["--output-layer", "tied"], max_update=2)
    out = str(tmp_path / "int8")
    run([tool("outlayers-export"), os.path.join(save, "checkpoint_last.pt"), out, "--to", "ctranslate2",
         "--quantization", "int8"])
    look = "import ctranslate2, sys; print(ctranslate2.Translator(sys.argv[1], device='cpu').compute_type)"
    proc = subprocess.run([sys.executable, "-c", look, out], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip().startswith("int8"), proc.stderr[-2000:]  # int8 weights, float32 or int8 activations


# -- refusals, on models built in this process (nothing to train) -------------------------------------------
REFUSED = [(name, spec.export) for name, spec in sorted(_ours(OUTPUT_LAYER_REGISTRY).items())
           if isinstance(spec.export, str)]


@pytest.mark.parametrize("name,reason", REFUSED, ids=[n for n, _ in REFUSED])
def test_a_layer_that_declares_a_reason_is_refused_with_it(name, reason, tiny_bin, tmp_path):
    from fairseq_outlayers.tools.vectors import write_random_vectors

    extra = ["--output-layer", name]
    if not OUTPUT_LAYER_REGISTRY[name].softmax_type:  # a layer that predicts vectors: random ones, and a loss for them
        vectors = str(tmp_path / "v.vec")
        write_random_vectors(os.path.join(tiny_bin, "dict.en.txt"), vectors, 16, 1, False)
        extra += ["--target-vectors", vectors, "--criterion", "cosine"]
    task, model = build_model(tiny_bin, extra=extra)
    with pytest.raises(ExportRefused) as refused:
        exporter.build_stock(model, model.outlayers_args, task)
    assert str(refused.value) == f"--output-layer {name} cannot be exported: {reason}"


def test_the_joint_layer_with_its_non_linear_context_is_refused(tiny_bin):
    task, model = build_model(tiny_bin, extra=["--output-layer", "joint"])
    with pytest.raises(ExportRefused, match=r"^--output-layer joint cannot be exported: its context sigma\(V h \+ "
                       r"b_v\) \(--joint-structure full, --joint-activation tanh\) is a non-linear layer"):
        exporter.build_stock(model, model.outlayers_args, task)


def test_the_joint_layer_without_its_non_linearity_folds_exactly(tiny_bin):
    """--joint-activation identity: the context V h + b_v is affine, so its offset becomes a per-word bias, which
    a stock LSTM holds (the Transformer refuses it: its projection has no bias)."""
    task, model = build_model(tiny_bin, arch_args=TINY_LSTM, extra=["--output-layer", "joint", "--joint-activation",
                                                                     "identity", "--joint-dim", "8"])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)  # a bias b_v and b far from their zero start
    stock, _ = exporter.build_stock(model, model.outlayers_args, task)
    assert exporter.max_difference(model, stock, task) < 1e-5
    task, model = build_model(tiny_bin, extra=["--output-layer", "joint", "--joint-activation", "identity"])
    with pytest.raises(ExportRefused, match="Transformer output projection has no bias"):
        exporter.build_stock(model, model.outlayers_args, task)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    # a target that holds the bias (CTranslate2): the stock Transformer with a biased output projection
    stock, _ = exporter.build_stock(model, model.outlayers_args, task, output_bias=True)
    assert stock.decoder.output_projection.bias is not None
    assert exporter.max_difference(model, stock, task) < 1e-5


def test_a_layer_that_declares_nothing_is_refused(tiny_bin, monkeypatch):
    """Refused in one line; docs/serving.md's generated table says so in the same words."""
    monkeypatch.setattr(OUTPUT_LAYER_REGISTRY["tied"], "export", None)
    task, model = build_model(tiny_bin, extra=["--output-layer", "tied"])
    with pytest.raises(ExportRefused, match=r"^--output-layer tied declares no export") as refused:
        exporter.build_stock(model, model.outlayers_args, task)
    export, how = _export_rows()[("--output-layer", "tied")]
    assert export == "not declared" and how.endswith(str(refused.value).replace("--output-layer tied ", "it "))


def test_an_lstm_with_a_deeper_decoder_is_refused(tiny_bin):
    task, model = build_model(tiny_bin, arch_args=TINY_LSTM + ["--decoder-layers", "2"],
                              extra=["--output-layer", "tied"])
    with pytest.raises(ExportRefused, match="needs --encoder-layers equal to --decoder-layers"):
        exporter.build_stock(model, model.outlayers_args, task)


def test_the_check_refuses_an_export_that_differs(tiny_bin, monkeypatch, tmp_path):
    """A declaration that gets the maths wrong is caught by the log-probability check, and nothing is written."""
    save = str(tmp_path / "ck")
    train(tiny_bin, save, extra=["--output-layer", "softmax"], max_update=2)
    monkeypatch.setattr(OUTPUT_LAYER_REGISTRY["softmax"], "export", lambda layer: (layer.weight * 1.5, None))
    out = str(tmp_path / "out")
    with pytest.raises(ExportRefused, match="log-probabilities up to .* nothing was written"):
        exporter.export(os.path.join(save, "checkpoint_last.pt"), out, "fairseq")
    assert os.listdir(tmp_path) == ["ck"]


# -- the command line ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tied_checkpoint(tiny_bin, tmp_path_factory):
    save = str(tmp_path_factory.mktemp("tied"))
    train(tiny_bin, save, extra=["--output-layer", "tied"], max_update=2)
    return os.path.join(save, "checkpoint_last.pt")


def _cli(*argv):
    proc = run([tool("outlayers-export"), *argv], check=False)
    return proc.returncode, proc.stderr.strip().splitlines()


def test_an_existing_out_is_refused_and_kept(tied_checkpoint, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    code, lines = _cli(tied_checkpoint, str(out), "--to", "fairseq")
    assert code == 1 and lines[-1] == (f"fairseq_outlayers: error: OUT '{out}' exists; choose another path or pass "
                                       "--force to replace it")
    assert (out / "mine.txt").read_text() == "keep"
    code, _ = _cli(tied_checkpoint, str(out), "--to", "fairseq", "--force")
    assert code == 0 and sorted(os.listdir(out)) == ["dict.de.txt", "dict.en.txt", "model.pt"]
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no temporary directory left beside it


def test_out_never_replaces_an_input(tied_checkpoint):
    save = os.path.dirname(tied_checkpoint)
    code, lines = _cli(tied_checkpoint, save, "--to", "fairseq", "--force")
    assert code == 1 and "is, holds or lies inside an input of this export" in lines[-1]
    assert os.path.exists(tied_checkpoint)


def test_a_damaged_checkpoint_is_one_line(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    code, lines = _cli(str(bad), str(tmp_path / "out"), "--to", "fairseq")
    assert code == 1 and len(lines) == 1 and lines[0].startswith("fairseq_outlayers: error: ") and str(bad) in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_refused_layer_writes_nothing(tiny_bin, tmp_path):
    save = str(tmp_path / "ck")
    train(tiny_bin, save, extra=["--output-layer", "softmax", "--output-bias"], max_update=2)
    code, lines = _cli(os.path.join(save, "checkpoint_last.pt"), str(tmp_path / "out"), "--to", "fairseq")
    assert code == 1 and lines[-1].startswith("fairseq_outlayers: error: stock fairseq's Transformer output "
                                              "projection has no bias")
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_quantization_needs_ctranslate2(tied_checkpoint, tmp_path):
    with pytest.raises(OutlayersConfigError, match="--quantization is CTranslate2's"):
        exporter.export(tied_checkpoint, str(tmp_path / "o"), "fairseq", quantization="int8")


def test_the_lstm_is_refused_by_ctranslate2(tiny_bin, tmp_path):
    save = str(tmp_path / "ck")
    train(tiny_bin, save, arch_args=TINY_LSTM, extra=["--output-layer", "tied"], max_update=2)
    with pytest.raises(ExportRefused, match=r"^--to ctranslate2: CTranslate2 converts fairseq Transformers only"):
        exporter.export(os.path.join(save, "checkpoint_last.pt"), str(tmp_path / "o"), "ctranslate2")
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_the_written_checkpoint_holds_only_plain_types(tied_checkpoint, tmp_path):
    out = str(tmp_path / "out")
    exporter.export(tied_checkpoint, out, "fairseq")
    unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(os.path.join(out, "model.pt"))
    assert unsafe == []
    state = torch.load(os.path.join(out, "model.pt"), weights_only=True)
    assert state["cfg"]["model"]["arch"] == "transformer" and state["cfg"]["common"]["user_dir"] is None
    ours = {"output_layer", "embeddings"} | {option.dest for registry in (OUTPUT_LAYER_REGISTRY, EMBEDDING_REGISTRY)
                                              for spec in registry.values() for option in spec.options}
    assert ours & set(state["cfg"]["model"]) == set()


def _export_blocks():
    """{page: the method folders its ``exports`` blocks name} of every page of docs/."""
    import glob
    import re

    from harness import REPO

    out = {}
    for page in sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
        with open(page, encoding="utf-8") as f:
            text = re.sub(r"^```.*?^```", "", f.read(), flags=re.M | re.S)  # a page printed as an example
            for match in re.finditer(r"<!-- generated: exports ([\w ]+) -->", text):
                out.setdefault(os.path.basename(page), []).extend(match.group(1).split())
    return out


def _export_rows():
    """{(flag, name): [export, how]} of the ``exports`` blocks of the docs, rendered from the registries."""
    from fairseq_outlayers.lab.option_blocks import _exports_block

    rows = {}
    folders = [f for names in _export_blocks().values() for f in names]
    assert len(folders) == len(set(folders)), folders  # a method's table is on one page
    for line in _exports_block(None, folders):
        if line.startswith("| `--"):
            options, export, how = line[2:-2].split(" | ")
            flag = options[1:].split(" ", 1)[0]
            for name in options.replace(f"`{flag} ", "`").split(", "):
                assert (flag, name.strip("`")) not in rows, line
                rows[(flag, name.strip("`"))] = [export, how]
    return rows


def test_the_serving_page_lists_every_seam_as_the_registries_declare_it():
    """Every output layer and embedding of the package is in a generated ``exports`` block, equal to its render
    from the registries: docs/serving.md's for the package's methods, a method's own page for one added later (so
    a new method changes no other page); "yes" with the function's name for a function, "no" with the reason for a
    sentence."""
    from fairseq_outlayers.lab import docs
    from harness import REPO

    blocks = _export_blocks()
    assert {"baselines", "joint", "fixed"} <= set(blocks["serving.md"])
    pages = [os.path.join(REPO, "docs", page) for page in blocks]
    assert docs.stale(pages, docs.Context(REPO)) == []
    rows = _export_rows()
    expected = {(flag, name): spec for flag, registry in (("--output-layer", OUTPUT_LAYER_REGISTRY),
                                                          ("--embeddings", EMBEDDING_REGISTRY))
                for name, spec in _ours(registry).items()}
    assert set(rows) == set(expected)
    for key, spec in expected.items():
        export, how = rows[key]
        if isinstance(spec.export, str):
            assert export == "no" and how == spec.export.replace("|", "\\|"), (key, rows[key])
        elif spec.export is None:  # a layer added without export= (docs/architecture.md's scaled-cosine)
            assert export == "not declared" and how.endswith(f"it {exporter.NOT_DECLARED}"), (key, rows[key])
        else:
            assert callable(spec.export) and export == "yes" and how.startswith(f"`{spec.export.__name__}`: "), key


def test_a_model_whose_options_are_a_dictconfig_exports(tiny_bin):
    """fairseq-hydra-train hands the model a DictConfig without the task's options; the export reads those from
    the task."""
    from omegaconf import OmegaConf

    task, model = build_model(tiny_bin, extra=["--output-layer", "tied"])
    options = {k: v for k, v in vars(model.outlayers_args).items()
               if k not in ("data", "source_lang", "target_lang", "task") and not isinstance(v, tuple)}
    hydra_like = OmegaConf.create(options)
    stock, stock_options = exporter.build_stock(model, hydra_like, task)
    assert exporter.max_difference(model, stock, task) == 0.0
    assert stock_options.arch == "transformer" and stock_options.data == tiny_bin
