"""Continuous outputs end to end: target vectors, the output layer, the criterions, and fairseq's CLIs."""
import argparse
import os
import re
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fairseq.data import Dictionary

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.methods.continuous.continuous_output import ContinuousOutput, TargetVectorEmbedding
from fairseq_outlayers.methods.continuous.nn_search import nearest_neighbours
from fairseq_outlayers.methods.continuous.target_vectors import SPECIAL_SEED, load_target_table
from harness import TINY_LSTM, TINY_TRANSFORMER, generate, logged_losses, train

M = 16


def write_vec(path, words_vectors, header=True):
    with open(path, "w", encoding="utf-8") as f:
        if header:
            f.write(f"{len(words_vectors)} {len(words_vectors[0][1])}\n")
        for w, v in words_vectors:
            f.write(w + " " + " ".join(f"{x:.6f}" for x in v) + " \n")  # word2vec writes a trailing space
    return path


def small_dictionary(words):
    d = Dictionary()
    for w in words:
        d.add_symbol(w)
    d.finalize(padding_factor=16)  # adds madeupwordNNNN fillers
    return d


# ------------------------------------------------------------------------------------------------------------
# vectors.py
# ------------------------------------------------------------------------------------------------------------

def test_vectors_aligned_to_dictionary(tmp_path):
    rng = np.random.default_rng(0)
    d = small_dictionary(["the", "cat", "sat", "mat"])
    entries = [(w, rng.standard_normal(6) * rng.uniform(0.5, 5)) for w in ["the", "cat", "sat", "</s>", "dog",
                                                                           "tree"]]
    path = write_vec(tmp_path / "v.vec", entries)
    t = load_target_table(d, str(path), min_coverage=0.5)
    vec = {w: v / np.linalg.norm(v) for w, v in entries}
    for w in ("the", "cat", "sat", "</s>"):
        assert np.allclose(t.table[d.index(w)].numpy(), vec[w], atol=1e-6)
    # <unk> = normalised mean of the unit vectors of file words outside the dictionary (paper, section 4.1)
    mean = vec["dog"] + vec["tree"]
    assert np.allclose(t.table[d.unk()].numpy(), mean / np.linalg.norm(mean), atol=1e-6)
    # a dictionary word without a vector shares <unk>'s vector and is never generated
    assert torch.equal(t.table[d.index("mat")], t.table[d.unk()]) and not t.decodable[d.index("mat")]
    assert t.report.missing == ["mat"] and t.report.covered == 3 and t.report.eligible == 4
    assert t.report.coverage == 0.75
    assert torch.equal(t.table[d.pad()], torch.zeros(6)) and not t.decodable[d.pad()]
    assert not t.decodable[d.bos()] and t.decodable[d.eos()] and t.decodable[d.unk()]
    fillers = [i for i, w in enumerate(d.symbols) if w.startswith("madeupword")]
    assert fillers and not t.decodable[fillers].any()
    norms = t.table.norm(dim=-1)
    assert torch.allclose(norms[[i for i in range(len(d)) if i != d.pad()]], torch.ones(len(d) - 1), atol=1e-6)
    # <s> and the fillers: fixed pseudo-random unit vectors, identical on every load
    again = load_target_table(d, str(write_vec(tmp_path / "w.vec", entries, header=False)))
    assert torch.equal(again.table, t.table)
    gen = torch.Generator().manual_seed(SPECIAL_SEED)
    first = F.normalize(torch.randn(1 + len(fillers), 6, generator=gen, dtype=torch.float64), dim=-1).float()
    assert torch.equal(t.table[d.bos()], first[0])  # <s> is the lowest fixed row
    assert any("normalised mean of the 2 file vectors" in line for line in t.report.lines())


def test_zero_and_repeated_vectors_are_counted_and_said(tmp_path):
    """A zero vector is ignored, a repeated word keeps its first vector; the report says both. No file name, or
    a missing file, is one line naming the option."""
    from fairseq_outlayers.errors import OutlayersConfigError

    d = small_dictionary(["the", "cat"])
    first, second = np.array([1.0, 0, 0]), np.array([0, 1.0, 0])
    path = write_vec(tmp_path / "v.vec", [("the", first), ("cat", np.zeros(3)), ("the", second), ("cat", second)])
    t = load_target_table(d, str(path))
    assert t.report.zero_vectors == 1 and t.report.duplicates == 1
    assert np.allclose(t.table[d.index("the")].numpy(), first) and np.allclose(t.table[d.index("cat")].numpy(), second)
    lines = t.report.lines()
    assert "1 zero vectors in the file were ignored" in lines
    assert "1 repeated words in the file: the first vector of each was kept" in lines
    with pytest.raises(OutlayersConfigError, match="--output-layer continuous needs --target-vectors FILE"):
        load_target_table(d, "")
    with pytest.raises(OutlayersConfigError, match=r"--target-vectors .*none.vec: no such file"):
        load_target_table(d, str(tmp_path / "none.vec"))


def test_centred_vectors_match_a_float64_hand_computation(tmp_path):
    """--target-vectors-center: unit vectors minus the mean of the dictionary words' unit vectors, renormalised;
    <unk> (mean of the outside words) and </s> are shifted by the same mean."""
    rng = np.random.default_rng(3)
    d = small_dictionary(["the", "cat", "sat", "mat"])
    common = rng.standard_normal(6) * 4  # a shared direction, as in vectors trained on a small corpus
    entries = [(w, common + rng.standard_normal(6)) for w in ["the", "cat", "sat", "</s>", "dog", "tree"]]
    t = load_target_table(d, str(write_vec(tmp_path / "v.vec", entries)), min_coverage=0.5, center=True)
    unit = {w: np.round(v, 6) / np.linalg.norm(np.round(v, 6)) for w, v in entries}
    mu = np.mean([unit[w] for w in ("the", "cat", "sat")], axis=0)  # covered dictionary words only
    def expect(v):
        return (v - mu) / np.linalg.norm(v - mu)
    for w in ("the", "cat", "sat", "</s>"):
        assert np.allclose(t.table[d.index(w)].numpy(), expect(unit[w]), atol=1e-6)
    assert np.allclose(t.table[d.unk()].numpy(), expect((unit["dog"] + unit["tree"]) / 2), atol=1e-6)
    # the centred dictionary vectors have mean zero before renormalising: here they are far less alike
    raw = load_target_table(d, str(tmp_path / "v.vec"), min_coverage=0.5)
    rows = [d.index(w) for w in ("the", "cat", "sat")]
    mean_cos = lambda table: float((table[rows] @ table[rows].T).sum() - 3) / 6  # noqa: E731
    assert mean_cos(raw.table) > 0.8 and mean_cos(t.table) < 0.0
    assert torch.equal(t.table[d.bos()], raw.table[d.bos()])  # fixed special vectors are not shifted
    assert any(line.startswith("centring: subtracted the mean of the 3 dictionary words") for line in t.report.lines())


@pytest.mark.parametrize("content,message", [
    ("3 4\nthe 1 2 3 4\ncat 1 2 3\nsat 1 2 3 4\n",
     r"v\.vec line 3: word 'cat' has 3 values but the file's vectors have 4"),
    ("the 1 2 3 4\ncat 1 2 x 4\n", r"v\.vec line 2: word 'cat' has a value that is not a number"),
    ("the 1 2 3 4\ncat 1 nan 3 4\n", r"v\.vec line 2: word 'cat' has a NaN"),
    ("the\n", r"v\.vec line 1: expected 'word v1 ... vm'"),
    ("", r"the file holds no vectors"),
])
def test_bad_vector_files_name_the_line(tmp_path, content, message):
    path = tmp_path / "v.vec"
    path.write_text(content)
    with pytest.raises(OutlayersConfigError, match=message):
        load_target_table(small_dictionary(["the", "cat", "sat"]), str(path))


def test_coverage_and_dimension_errors(tmp_path):
    d = small_dictionary([f"w{i}" for i in range(10)])
    path = str(write_vec(tmp_path / "few.vec", [("w1", [1.0, 0.0]), ("w2", [0.0, 1.0]), ("x", [1.0, 1.0])]))
    with pytest.raises(OutlayersConfigError, match=r"few\.vec: only 2 of the 10 .* \(20\.0%\) have a vector"):
        load_target_table(d, path, min_coverage=0.5)
    assert load_target_table(d, path, min_coverage=0.2).report.coverage == 0.2
    with pytest.raises(OutlayersConfigError, match=r"holds 2-dimensional vectors but --continuous-dim is 300"):
        load_target_table(d, path, min_coverage=0.0, expected_dim=300)
    with pytest.raises(OutlayersConfigError, match="no such file"):
        load_target_table(d, str(tmp_path / "absent.vec"))
    with pytest.raises(OutlayersConfigError, match=r"min-coverage must be in \[0, 1\]"):
        load_target_table(d, path, min_coverage=1.5)


def test_word2vec_binary_equals_text(tmp_path):
    gensim = pytest.importorskip("gensim")
    rng = np.random.default_rng(2)
    words = ["the", "cat", "sat", "dog"]
    kv = gensim.models.KeyedVectors(5)
    kv.add_vectors(words, rng.standard_normal((4, 5)).astype(np.float32))
    kv.save_word2vec_format(str(tmp_path / "v.bin"), binary=True)
    kv.save_word2vec_format(str(tmp_path / "v.vec"), binary=False)
    d = small_dictionary(["the", "cat", "sat"])
    a = load_target_table(d, str(tmp_path / "v.bin"))
    b = load_target_table(d, str(tmp_path / "v.vec"))
    assert torch.allclose(a.table, b.table, atol=1e-6) and torch.equal(a.decodable, b.decodable)


def test_fasttext_binary_gives_vectors_to_unseen_words(tmp_path):
    gensim = pytest.importorskip("gensim")
    from gensim.models.fasttext import FastText, save_facebook_model

    sentences = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "sat", "there"]] * 20
    model = FastText(sentences=sentences, vector_size=8, min_count=1, epochs=2, workers=1, seed=1)
    save_facebook_model(model, str(tmp_path / "ft.bin"))
    d = small_dictionary(["the", "cat", "sat", "cats"])  # 'cats' was never seen: built from n-grams
    t = load_target_table(d, str(tmp_path / "ft.bin"))
    assert t.report.coverage == 1.0 and t.decodable[d.index("cats")]
    expected = model.wv["cats"] / np.linalg.norm(model.wv["cats"])
    assert np.allclose(t.table[d.index("cats")].numpy(), expected, atol=1e-5)
    # <unk>: mean of the model's words outside the dictionary (on, mat, a, dog, there), not of the specials
    outside = sum(model.wv[w] / np.linalg.norm(model.wv[w]) for w in ["on", "mat", "a", "dog", "there"])
    assert np.allclose(t.table[d.unk()].numpy(), outside / np.linalg.norm(outside), atol=1e-5)
    (tmp_path / "bad.bin").write_bytes(b"not a model at all")
    with pytest.raises(OutlayersConfigError, match=r"bad\.bin: gensim cannot read it"):
        load_target_table(d, str(tmp_path / "bad.bin"))


# ------------------------------------------------------------------------------------------------------------
# the output layer
# ------------------------------------------------------------------------------------------------------------

def _table(V=11, m=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    table = F.normalize(torch.randn(V, m, generator=gen), dim=-1)
    table[1] = 0
    decodable = torch.ones(V, dtype=torch.bool)
    decodable[[0, 1, 7]] = False
    return table, decodable


def test_output_layer_scores_probabilities_and_counts():
    table, decodable = _table()
    V, m, d = table.shape[0], table.shape[1], 8
    layer = ContinuousOutput(table, decodable, d, layernorm=True)
    feats = torch.randn(2, 3, d)
    e_hat = layer(feats)
    assert e_hat.shape == (2, 3, m)
    lprobs = layer.get_normalized_probs((e_hat.detach(),), log_probs=True)
    logits = e_hat.detach().double() @ table.double().T  # vMF log-density up to log C_m(κ), which cancels
    logits[..., ~decodable] = -np.inf
    assert torch.allclose(lprobs.double(), torch.log_softmax(logits, -1), atol=1e-5)
    assert torch.isinf(lprobs[..., ~decodable]).all()
    assert torch.allclose(layer.get_normalized_probs((e_hat.detach(),), log_probs=False).sum(-1), torch.ones(2, 3))
    _, ids = layer.predict(e_hat.detach().reshape(-1, m))
    assert torch.equal(ids[:, 0], lprobs.reshape(-1, V).argmax(-1))  # highest probability = nearest neighbour
    counts = layer.parameter_counts()
    assert counts == {"owned": d * m + m + 2 * d, "trained": d * m + m + 2 * d, "frozen": V * m}  # LayerNorm: 2d
    assert layer.frozen_numel() == V * m
    state = layer.state_dict()
    assert torch.equal(state["table"], table) and torch.equal(state["decodable"], decodable)
    # cosine scoring for models trained with the empirical losses
    scaled = ContinuousOutput(table, decodable, d, score_scale=10.0)
    scaled.load_state_dict(layer.state_dict(), strict=False)
    lp = scaled.get_normalized_probs((e_hat.detach(),), log_probs=True)
    ref = 10.0 * F.normalize(e_hat.detach().double(), dim=-1) @ table.double().T
    ref[..., ~decodable] = -np.inf
    assert torch.allclose(lp.double(), torch.log_softmax(ref, -1), atol=1e-5)


def test_tied_input_embedding_shares_the_table():
    table, decodable = _table()
    V, m, d = table.shape[0], table.shape[1], 8
    emb = TargetVectorEmbedding(table, d, padding_idx=1)
    layer = ContinuousOutput(None, decodable, d, tied_embedding=emb)
    assert layer.target_table is emb.table
    tokens = torch.tensor([[2, 1, 5]])
    assert torch.allclose(emb(tokens), table[tokens] @ emb.proj.weight.T)
    assert torch.equal(emb(tokens)[0, 1], torch.zeros(d))  # padding embeds to zero
    assert "table" not in dict(layer.named_buffers())  # saved once, under the embedding
    assert layer.frozen_numel() == 0 and emb.frozen_numel() == V * m
    assert sum(p.numel() for p in emb.parameters()) == m * d


# ------------------------------------------------------------------------------------------------------------
# through fairseq's CLIs
# ------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_vectors(tiny_bin, tmp_path_factory):
    """Random m = 16 vectors for every target word of the tiny corpus, plus 10 words outside it."""
    d = Dictionary.load(os.path.join(tiny_bin, "dict.en.txt"))
    words = [w for w in d.symbols[d.nspecial:] if not w.startswith("madeupword")]
    rng = np.random.default_rng(0)
    entries = [(w, rng.standard_normal(M)) for w in words + [f"other{i}" for i in range(10)]]
    return str(write_vec(tmp_path_factory.mktemp("vec") / "en.vec", entries))


def _greedy_nearest_neighbour(ckpt, bin_dir, max_len):
    """The paper's decoding, written out: feed back the nearest target vector's word at every step."""
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([ckpt], arg_overrides={"data": bin_dir})
    model = models[0].eval()
    task.load_dataset("test")
    ds, tgt = task.dataset("test"), task.target_dictionary
    layer = model.decoder.output_projection
    out = {}
    with torch.no_grad():
        for i in range(len(ds)):
            src = ds[i]["source"].unsqueeze(0)
            enc = model.encoder(src, src_lengths=torch.tensor([src.numel()]))
            tokens = [tgt.eos()]
            for step in range(max_len + 1):
                e_hat, _ = model.decoder(torch.tensor([tokens]), encoder_out=enc)
                allowed = layer.decodable.clone()
                if step == 0:
                    allowed[tgt.eos()] = False  # fairseq's --min-len 1
                if step == max_len:
                    allowed[:] = False
                    allowed[tgt.eos()] = True
                _, ids = nearest_neighbours(e_hat[0, -1:], layer.target_table, candidates=allowed)
                word = ids[0, 0].item()
                if word == tgt.eos():
                    break
                tokens.append(word)
            out[i] = tgt.string(torch.tensor(tokens[1:]))
    return model, task, out


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied-input"])
def test_state_dict_keys_are_the_release_ones(tiny_bin, tiny_vectors, tied):
    """Checkpoints of release 2026-11 load only while these keys stay as they are."""
    from harness import build_model

    extra = ["--tie-input-to-target-vectors"] if tied else []
    _, model = build_model(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "continuous", "--target-vectors",
                                                        tiny_vectors, "--criterion", "cosine"] + extra)
    keys = sorted(k for k in model.state_dict() if ".layers." not in k and "layer_norm" not in k)
    embedding = ["decoder.embed_tokens.proj.weight", "decoder.embed_tokens.table"] if tied else [
        "decoder.embed_tokens.weight", "decoder.output_projection.table"]
    assert keys == sorted(embedding + ["decoder.output_projection.decodable", "decoder.output_projection.proj.bias",
                                       "decoder.output_projection.proj.weight", "decoder.version",
                                       "encoder.embed_tokens.weight", "encoder.version"])


def test_train_then_generate_greedy_is_nearest_neighbour(tiny_bin, tiny_vectors, tmp_path):
    vec = str(tmp_path / "en.vec")
    shutil.copy(tiny_vectors, vec)
    save = str(tmp_path / "ckpt")
    proc = train(tiny_bin, save, TINY_TRANSFORMER, ["--output-layer", "continuous", "--target-vectors", vec,
                                                   "--criterion", "vmf_nll", "--lr", "0.005"], max_update=30)
    out = proc.stdout + proc.stderr
    losses = logged_losses(out)
    assert len(losses) == 30 and np.mean(losses[-5:]) < np.mean(losses[:5]), losses
    assert "coverage: 40 of 40 dictionary words have a vector (100.00%)" in out
    assert "nn_acc" in out  # validation reports nearest-neighbour accuracy
    os.remove(vec)  # the table is in the checkpoint: decoding needs no vector file
    ckpt = os.path.join(save, "checkpoint_last.pt")
    state = torch.load(ckpt, map_location="cpu")
    assert state["model"]["decoder.output_projection.table"].shape == (48, M)
    _, hyps = generate(tiny_bin, ckpt, ["--beam", "1", "--max-len-a", "0", "--max-len-b", "10"])
    model, task, expected = _greedy_nearest_neighbour(ckpt, tiny_bin, max_len=10)
    assert len(hyps) == 24 and hyps == expected
    assert any(len(h.split()) > 1 for h in hyps.values())
    _, beam5 = generate(tiny_bin, ckpt, ["--beam", "5"])
    assert len(beam5) == 24
    from fairseq_outlayers.parameter_counts import parameter_report

    report = parameter_report(model)
    assert report["output"] == 32 * M + M + 48 * M and report["output_trained"] == 32 * M + M
    _criterion_checks(model, task)


def _criterion_checks(model, task):
    """Every continuous criterion on one test batch, in process: loss = sum over non-padding tokens of the
    per-token loss (float64 reference), metrics present and summable."""
    from fairseq.logging import metrics

    from fairseq_outlayers.methods.continuous.criterions import (CosineCriterion, L2Criterion, MaxMarginCriterion,
                                                                VMFNLLCriterion)
    from fairseq_outlayers.methods.continuous import vmf_losses as vmf

    ds = task.dataset("test")
    sample = ds.collater([ds[i] for i in range(6)])
    assert sample["target"].eq(task.target_dictionary.pad()).any()  # the batch has padding
    layer = model.decoder.output_projection
    with torch.no_grad():
        e_hat = model(**sample["net_input"])[0].double()
    keep = sample["target"].ne(task.target_dictionary.pad())
    pred, ids = e_hat[keep], sample["target"][keep]
    vecs = layer.target_table.double()[ids]
    table = layer.target_table.double()
    references = [
        (VMFNLLCriterion(task, False, vmf_variant="reg1"), vmf.vmf_nll_loss(pred, vecs, 0.2, 1.0)),
        (VMFNLLCriterion(task, False), vmf.vmf_released_loss(pred, vecs, 0.2)),
        (VMFNLLCriterion(task, False, vmf_variant="released", vmf_log_cm="approx"),
         vmf.vmf_released_loss(pred, vecs, 0.2, approximate=True)),
        (CosineCriterion(task, False), 1 - (F.normalize(pred, dim=-1) * vecs).sum(-1)),
        (L2Criterion(task, False), (pred - vecs).norm(dim=-1)),
        (MaxMarginCriterion(task, False, margin_negative="synthetic"), vmf.synthetic_margin_loss(pred, vecs, 0.5)),
        (MaxMarginCriterion(task, False), vmf.max_margin_loss(pred, ids, table, 0.5, layer.decodable)),
    ]
    # --vmf-warmup-updates 3: the cosine loss before update 3 (no κ alarm counted), the released vMF loss from it
    warm = VMFNLLCriterion(task, False, vmf_warmup_updates=3)
    for step, expected in ((2, 1 - (F.normalize(pred, dim=-1) * vecs).sum(-1)), (3, vmf.vmf_released_loss(pred, vecs, 0.2))):
        model.set_num_updates(step)
        loss, _, log = warm(model, sample)
        assert layer.num_updates == step
        assert loss.item() == pytest.approx(expected.sum().item(), rel=1e-5), step
        if step < 3:
            assert log["kappa_low"] == 0 and log["kappa_high"] == 0
    model.set_num_updates(0)
    for criterion, expected in references:
        loss, sample_size, log = criterion(model, sample)
        assert sample_size == sample["ntokens"] == keep.sum().item()
        assert loss.item() == pytest.approx(expected.sum().item(), rel=1e-5), type(criterion).__name__
        assert log["nn_total"] == keep.sum()
        assert log["nn_correct"] == (layer.predict(pred.float())[1][:, 0] == ids).sum()
        with metrics.aggregate() as agg:
            criterion.reduce_metrics([log, log])
        values = agg.get_smoothed_values()
        assert values["nn_acc"] == pytest.approx(100.0 * log["nn_correct"].item() / log["nn_total"].item(), abs=1e-3)
        assert values["cos"] == pytest.approx(F.cosine_similarity(pred, vecs, dim=-1).mean().item(), abs=1e-4)
        assert values["norm"] == pytest.approx(pred.norm(dim=-1).mean().item(), abs=1e-3)
    assert criterion.logging_outputs_can_be_summed()
    # a half-precision model (what --fp16/--bf16 train): the losses are still computed in float32, no NaN/inf
    import copy

    for dtype in (torch.bfloat16, torch.float16):
        half = copy.deepcopy(model).to(dtype).train()
        assert half.decoder.output_projection.target_table.dtype == dtype
        for criterion, expected in references[:1] + references[-1:]:
            loss, _, _ = criterion(half, sample)
            assert loss.dtype == torch.float32 and torch.isfinite(loss)
            assert loss.item() == pytest.approx(expected.sum().item(), rel=0.05, abs=0.5)
            loss.backward()
            grads = [p.grad for p in half.parameters() if p.grad is not None]
            assert grads and all(torch.isfinite(g.float()).all() for g in grads)
    with pytest.raises(OutlayersConfigError, match=r"--vmf-lambda2 must be in \(0, 1\], got 0"):
        VMFNLLCriterion(task, False, vmf_lambda2=0.0)
    with pytest.raises(OutlayersConfigError, match=r"--margin must be in \(0, 2\], got 0"):
        MaxMarginCriterion(task, False, margin=0.0)
    with pytest.raises(OutlayersConfigError, match=r"--margin must be in \(0, 1\], got 1.5 \(with --margin-negative "):
        MaxMarginCriterion(task, False, margin=1.5, margin_negative="synthetic")
    MaxMarginCriterion(task, False, margin=1.5)  # the informative negative's gap can reach 2
    from fairseq_outlayers.methods.continuous.criterions import continuous_output_layer

    with pytest.raises(OutlayersConfigError, match="need --output-layer continuous --target-vectors FILE"):
        continuous_output_layer(torch.nn.Linear(2, 2))


def test_max_margin_default_negative_is_unchanged():
    """Without --margin-negative (or with informative) max_margin computes exactly what it did before the option:
    max_margin_loss with the searched negative, bit for bit; synthetic is syn-margin on the target rows."""
    from types import SimpleNamespace

    from fairseq_outlayers.methods.continuous.criterions import MaxMarginCriterion
    from fairseq_outlayers.methods.continuous.vmf_losses import max_margin_loss, synthetic_margin_loss

    gen = torch.Generator().manual_seed(3)
    table = F.normalize(torch.randn(50, M, generator=gen), dim=-1)
    table[1] = 0.0  # padding
    decodable = torch.ones(50, dtype=torch.bool)
    decodable[[0, 1, 7]] = False
    layer = SimpleNamespace(target_table=table, decodable=decodable, chunk_size=16)
    e_hat = torch.randn(30, M, generator=gen) * 4
    ids = torch.randint(2, 50, (30,), generator=gen)
    vecs = table.index_select(0, ids)
    expected = max_margin_loss(e_hat, ids, table, 0.3, candidates=decodable, chunk_size=16)
    for criterion in (MaxMarginCriterion(None, False, margin=0.3),
                      MaxMarginCriterion(None, False, margin=0.3, margin_negative="informative")):
        assert torch.equal(criterion.token_losses(e_hat, ids, vecs, layer), expected)
    synthetic = MaxMarginCriterion(None, False, margin=0.3, margin_negative="synthetic")
    got = synthetic.token_losses(e_hat, ids, vecs, layer)
    assert torch.equal(got, synthetic_margin_loss(e_hat, vecs, 0.3)) and not torch.allclose(got, expected)


@pytest.mark.parametrize("negative", ["informative", "synthetic"])
def test_lstm_tied_max_margin_and_errors(tiny_bin, tiny_vectors, tmp_path, negative):
    save = str(tmp_path / "ckpt")
    extra = [] if negative == "informative" else ["--margin-negative", negative]  # the default: no option
    proc = train(tiny_bin, save, TINY_LSTM, ["--output-layer", "continuous", "--target-vectors", tiny_vectors,
                                             "--tie-input-to-target-vectors", "--criterion", "max_margin"] + extra,
                 max_update=8)
    losses = logged_losses(proc.stdout + proc.stderr)
    assert len(losses) == 8 and all(np.isfinite(losses)) and min(losses[-3:]) < losses[0], losses
    state = torch.load(os.path.join(save, "checkpoint_last.pt"), map_location="cpu")["model"]
    assert "decoder.embed_tokens.table" in state and "decoder.output_projection.table" not in state
    assert state["decoder.embed_tokens.proj.weight"].shape == (32, M)
    if negative != "informative":
        return
    # a vector file that covers 2 of the 40 words: one line naming the file, no traceback
    few = str(write_vec(tmp_path / "few.vec", [("T5", [1.0, 0.0]), ("T6", [0.0, 1.0])]))
    proc = train(tiny_bin, str(tmp_path / "x"), TINY_LSTM, ["--output-layer", "continuous", "--target-vectors",
                                                            few, "--criterion", "cosine"], max_update=1, check=False,
                 cli="outlayers-train")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "few.vec: only 2 of the 40 target dictionary words (5.0%) have a vector" in proc.stderr


def test_vmf_compile_trains_as_eager_through_fairseq_train(tiny_bin, tmp_path):
    """--vmf-compile through fairseq-train (m = 32: the compiled path): the same logged losses, cosines and norms
    as the eager loss, update by update and on validation; --vmf-log-cm approx beside it is refused at once."""
    d = Dictionary.load(os.path.join(tiny_bin, "dict.en.txt"))
    rng = np.random.default_rng(5)
    vec = str(write_vec(tmp_path / "en32.vec", [(w, rng.standard_normal(32)) for w in d.symbols[d.nspecial:]]))
    args = ["--output-layer", "continuous", "--target-vectors", vec, "--criterion", "vmf_nll", "--lr", "0.005"]
    logs = []
    for extra in ([], ["--vmf-compile"]):
        proc = train(tiny_bin, str(tmp_path / f"ckpt{len(logs)}"), TINY_TRANSFORMER, args + extra, max_update=6)
        out = proc.stdout + proc.stderr
        assert "torch.compile of" not in out  # no fallback
        assert ("--vmf-compile: the vMF loss runs through torch.compile" in out) == bool(extra)
        logs.append({key: logged_losses(out, key) for key in ("loss", "cos", "norm")})
        logs[-1]["valid"] = [float(x) for x in re.findall(r"valid on 'valid' subset \| loss (-?[\d.]+)", out)]
    eager, compiled = logs
    assert len(eager["loss"]) == 6 and eager["valid"], eager
    for key in eager:
        assert compiled[key] == pytest.approx(eager[key], rel=1e-3, abs=1e-3), key
    proc = train(tiny_bin, str(tmp_path / "x"), TINY_TRANSFORMER, args + ["--vmf-compile", "--vmf-log-cm", "approx"],
                 max_update=1, check=False, cli="outlayers-train")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--vmf-compile compiles the exact log C_m; --vmf-log-cm approx would run eagerly" in proc.stderr


def test_presets():
    from fairseq.models import ARCH_CONFIG_REGISTRY

    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["outlayers_lstm_vmf_continuous"](args)
    assert args.output_layer == "continuous" and args.decoder_hidden_size == 1024 and args.decoder_layers == 2
    assert args.target_vectors_min_coverage == 0.5 and args.embeddings == "standard"
    args = argparse.Namespace(tie_input_to_target_vectors=True)
    ARCH_CONFIG_REGISTRY["outlayers_transformer_small_continuous"](args)
    assert args.output_layer == "continuous" and args.embeddings == "target-vectors"
    assert args.decoder_embed_dim == 256 and args.decoder_layers == 3
