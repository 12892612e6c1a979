"""The model and training side: fingerprints checked at resume and decode, options of an unselected seam,
criterion/output-layer mismatches, --continuous-topk 1, and an unreadable checkpoint_last.pt."""
import argparse
import os
import re
import shutil

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary

from fairseq_outlayers.errors import OutlayersConfigError
from harness import (REPO, TINY_TRANSFORMER, USER_DIR, build_model, generate, make_corpus, pairing_file, preprocess, run,
                     tool, train, train_args)

M = 16
CONTINUOUS = ["--output-layer", "continuous", "--tie-input-to-target-vectors", "--criterion", "cosine"]


def write_vectors(path, dict_path, seed=0):
    d = Dictionary.load(dict_path)
    words = [w for w in d.symbols[d.nspecial:] if not w.startswith("madeupword")]
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{len(words)} {M}\n")
        for w in words:
            f.write(w + " " + " ".join(f"{x:.6f}" for x in rng.standard_normal(M)) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def vectors(tiny_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("vec")
    return (write_vectors(d / "a.vec", os.path.join(tiny_bin, "dict.en.txt"), seed=0),
            write_vectors(d / "b.vec", os.path.join(tiny_bin, "dict.en.txt"), seed=1))


@pytest.fixture(scope="module")
def other_bin(tmp_path_factory):
    """Same sizes, other words in other orders: dictionaries that differ from tiny_bin's."""
    raw = make_corpus(str(tmp_path_factory.mktemp("raw2")), seed=1)
    return preprocess(raw, str(tmp_path_factory.mktemp("bin2")))


@pytest.fixture(scope="module")
def continuous_ckpt(tiny_bin, vectors, tmp_path_factory):
    save = str(tmp_path_factory.mktemp("cont"))
    train(tiny_bin, save, TINY_TRANSFORMER, CONTINUOUS + ["--target-vectors", vectors[0], "--lr", "0.005"],
          max_update=30)
    return save


def one_line_error(proc, text):
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert text in proc.stderr, proc.stderr[-3000:]


# ---- options of a seam that is not selected ---------------------------------------------------------------------
@pytest.mark.parametrize("extra, message", [
    (["--output-layer", "tied", "--joint-dim", "1024"], "--joint-dim needs --output-layer joint; --output-layer tied"),
    (["--output-layer", "tied", "--pairing", "p.txt"], "--pairing needs --embeddings shared-private; --embeddings "
                                                       "standard would ignore it"),
    (["--output-layer", "softmax", "--fixed-targets-dim", "8"], "--fixed-targets-dim needs --output-layer fixed"),
    (["--output-layer", "softmax", "--target-vectors", "v.vec"], "--target-vectors needs --output-layer continuous"),
    (["--output-layer", "softmax", "--tie-input-to-target-vectors"],
     "--tie-input-to-target-vectors needs --output-layer continuous; --output-layer softmax would ignore it"),
    (["--output-layer", "joint", "--output-bias"], "--output-bias is an option of --output-layer softmax, tied"),
])
def test_options_of_an_unselected_seam_are_errors(tiny_bin, extra, message):
    with pytest.raises(OutlayersConfigError, match=message) as e:
        build_model(tiny_bin, TINY_TRANSFORMER, extra)
    assert "needs --target-vectors FILE" not in str(e.value)


def test_selected_options_and_rebuilt_checkpoints_still_work(tiny_bin):
    build_model(tiny_bin, ["--arch", "outlayers_transformer_tiny",
                           "--output-layer", "joint", "--joint-dim", "64"])
    # an option at its default changes nothing, so it is not refused (the check runs on the filled arguments)
    build_model(tiny_bin, TINY_TRANSFORMER + ["--output-layer", "tied", "--joint-dim", "512"])
    from fairseq.models import ARCH_CONFIG_REGISTRY

    # the arguments of a checkpoint written before the check (ignored options recorded): rebuilt without error
    old = argparse.Namespace(output_layer="tied", joint_dim=1024, pairing="gone.txt", criterion="cosine")
    ARCH_CONFIG_REGISTRY["outlayers_transformer"](old)
    assert old.output_layer == "tied" and old.joint_dim == 1024


# ---- criterion / output layer -----------------------------------------------------------------------------------
@pytest.mark.parametrize("layer, criterion, message", [
    ("continuous", "cross_entropy", "--criterion cross_entropy scores a softmax over the vocabulary, but "
                                    "--output-layer continuous predicts a word vector"),
    ("continuous", "label_smoothed_cross_entropy", "--criterion label_smoothed_cross_entropy scores a softmax"),
    ("continuous", "sampled_softmax", "--criterion sampled_softmax scores a softmax"),
    ("softmax", "vmf_nll", "--criterion vmf_nll needs --output-layer continuous"),
    ("tied", "cosine", "--criterion cosine needs --output-layer continuous"),
    ("joint", "l2", "--criterion l2 needs --output-layer continuous"),
    ("fixed", "max_margin", "--criterion max_margin needs --output-layer continuous"),
])
def test_criterion_output_layer_mismatch_when_options_are_parsed(tiny_bin, vectors, layer, criterion, message):
    extra = ["--output-layer", layer, "--criterion", criterion]
    if layer == "continuous":
        extra += ["--target-vectors", vectors[0]]
    with pytest.raises(OutlayersConfigError, match=message):
        build_model(tiny_bin, TINY_TRANSFORMER, extra)


def test_continuous_with_sampled_softmax_fails_before_the_data(tiny_bin, vectors, tmp_path):
    proc = train(tiny_bin, str(tmp_path / "s"), TINY_TRANSFORMER,
                 ["--output-layer", "continuous", "--target-vectors", vectors[0], "--criterion", "sampled_softmax"],
                 max_update=1, check=False, cli="outlayers-train")
    one_line_error(proc, "--criterion sampled_softmax scores a softmax over the vocabulary")
    assert "examples" not in proc.stdout + proc.stderr  # no data split was loaded
    assert not os.path.exists(tmp_path / "s" / "crash.pt")


# ---- fingerprints -----------------------------------------------------------------------------------------------
def test_resume_with_another_target_vector_file(tiny_bin, vectors, continuous_ckpt, tmp_path):
    save = str(tmp_path / "resume")
    shutil.copytree(continuous_ckpt, save)
    same = train(tiny_bin, save, TINY_TRANSFORMER, CONTINUOUS + ["--target-vectors", vectors[0]], max_update=31)
    assert "num_updates 31" in same.stdout + same.stderr
    proc = train(tiny_bin, save, TINY_TRANSFORMER, CONTINUOUS + ["--target-vectors", vectors[1]], max_update=32,
                 check=False, cli="outlayers-train")
    one_line_error(proc, f"--target-vectors {vectors[1]} (sha256 ")
    assert f"differs from the one {save}/checkpoint_last.pt was trained with, {vectors[0]} (sha256" in proc.stderr
    assert "--outlayers-allow-mismatch" in proc.stderr and "examples" not in proc.stdout + proc.stderr
    allowed = train(tiny_bin, save, TINY_TRANSFORMER, CONTINUOUS + ["--target-vectors", vectors[1],
                                                                     "--outlayers-allow-mismatch"], max_update=32)
    assert "(allowed by --outlayers-allow-mismatch)" in allowed.stdout + allowed.stderr
    # the checkpoint's table was kept, so the checkpoint now records the file that table came from
    model_args = torch.load(os.path.join(save, "checkpoint_last.pt"), weights_only=False)["cfg"]["model"]
    assert model_args.outlayers_fingerprints["target_vectors"]["path"] == vectors[0]


def test_decode_needs_the_training_dictionaries_not_the_vector_file(tiny_bin, other_bin, vectors, continuous_ckpt,
                                                                      tmp_path):
    ckpt = os.path.join(str(tmp_path), "model.pt")
    shutil.copy(os.path.join(continuous_ckpt, "checkpoint_last.pt"), ckpt)
    state = torch.load(ckpt, weights_only=False)
    vec = str(tmp_path / "moved.vec")
    shutil.copy(vectors[0], vec)
    state["cfg"]["model"].target_vectors = vec  # recorded path of a file that is then removed
    torch.save(state, ckpt)
    os.remove(vec)
    _, hyps = generate(tiny_bin, ckpt)
    assert len(hyps) == 24
    proc = run([tool("outlayers-generate"), other_bin, "--user-dir", USER_DIR,
                "--path", ckpt, "--beam", "2", "--cpu"], check=False)
    one_line_error(proc, f"the source dictionary {other_bin}/dict.de.txt (48 symbols, sha256 ")
    assert f"differs from the one this checkpoint was trained with ({tiny_bin}/dict.de.txt" in proc.stderr
    assert "--model-overrides \"{'outlayers_allow_mismatch': True}\"" in proc.stderr
    _, hyps = generate(other_bin, ckpt, ["--model-overrides", "{'outlayers_allow_mismatch': True}"])
    assert len(hyps) == 24


def test_softmax_checkpoint_target_dictionary_and_old_checkpoints(tiny_bin, other_bin, tmp_path):
    save = str(tmp_path / "sm")
    train(tiny_bin, save, TINY_TRANSFORMER, ["--output-layer", "softmax"], max_update=2)
    ckpt = os.path.join(save, "checkpoint_last.pt")
    # only the target side differs: keep tiny_bin's source dictionary
    mixed = str(tmp_path / "mixed")
    shutil.copytree(other_bin, mixed)
    for f in os.listdir(tiny_bin):
        if f.endswith(".de.bin") or f.endswith(".de.idx") or f == "dict.de.txt":
            shutil.copy(os.path.join(tiny_bin, f), os.path.join(mixed, f))
    proc = generate(mixed, ckpt, check=False, cli="outlayers-generate")[0]
    one_line_error(proc, f"the target dictionary {mixed}/dict.en.txt")
    # a dictionary the checkpoint recorded no fingerprint of is not checked
    state = torch.load(ckpt, weights_only=False)
    del state["cfg"]["model"].outlayers_fingerprints["tgt_dict"]
    old = str(tmp_path / "old.pt")
    torch.save(state, old)
    assert generate(mixed, old)[0].returncode == 0


def test_resume_with_another_pairing_file(tiny_raw, tiny_bin, tmp_path):
    pairing = pairing_file(tiny_raw, tiny_bin, str(tmp_path / "pairs.txt"))
    other = str(tmp_path / "other.txt")
    with open(pairing, encoding="utf-8") as f, open(other, "w", encoding="utf-8") as g:
        g.write(f.read() + "# edited\n")
    save = str(tmp_path / "sp")
    extra = ["--embeddings", "shared-private", "--output-layer", "tied"]
    train(tiny_bin, save, TINY_TRANSFORMER, extra + ["--pairing", pairing], max_update=2)
    proc = train(tiny_bin, save, TINY_TRANSFORMER, extra + ["--pairing", other], max_update=3, check=False,
                 cli="outlayers-train")
    one_line_error(proc, f"--pairing {other} (sha256 ")
    assert f"was trained with, {pairing} (sha256" in proc.stderr and "its pairing (index maps)" in proc.stderr


# ---- --continuous-topk 1 ----------------------------------------------------------------------------------------
def test_continuous_topk_one_is_raised_to_the_minimum(tiny_bin, continuous_ckpt):
    proc, hyps = generate(tiny_bin, os.path.join(continuous_ckpt, "checkpoint_last.pt"),
                          ["--model-overrides", "{'continuous_topk': 1}", "--beam", "1"])
    assert len(hyps) == 24 and "--continuous-topk 1: with fewer than 2 words" in proc.stdout + proc.stderr


# ---- unreadable checkpoint_last.pt ------------------------------------------------------------------------------
def _truncate(last):
    with open(last, "r+b") as f:
        f.truncate(os.path.getsize(last) // 2)
    return os.path.getsize(last)


def test_outlayers_train_resumes_from_the_newest_intact_checkpoint(tiny_bin, tmp_path):
    """fairseq saves checkpoint_1_2.pt, then checkpoint_best.pt and checkpoint_last.pt at update 4."""
    save = str(tmp_path / "t")
    train(tiny_bin, save, TINY_TRANSFORMER, ["--save-interval-updates", "2"], max_update=4)
    last = os.path.join(save, "checkpoint_last.pt")
    size = _truncate(last)
    proc = run([tool("outlayers-train")] + train_args(tiny_bin, save, TINY_TRANSFORMER, max_update=6, user_dir=None))
    out = proc.stdout + proc.stderr
    assert f"{last} is unreadable ({size} bytes" in out and "checkpoint_best.pt (4 updates)" in out
    assert re.search(r"Loaded checkpoint \S+/checkpoint_best.pt \(epoch \d+ @ 4 updates\)", out)
    assert "num_updates 6" in out
    # nothing intact left: one line, the file untouched
    for f in os.listdir(save):
        if f != "checkpoint_last.pt":
            os.remove(os.path.join(save, f))
    with open(last, "r+b") as f:
        f.truncate(100)
    proc = run([tool("outlayers-train")] + train_args(tiny_bin, save, TINY_TRANSFORMER, max_update=8, user_dir=None),
               check=False)
    assert proc.returncode == 1 and "holds no intact checkpoint" in proc.stderr and "Traceback" not in proc.stderr
    assert os.path.getsize(last) == 100


@pytest.mark.long(29)
def test_train_sh_resumes_from_the_newest_intact_checkpoint(tiny_bin, tmp_path):
    save = str(tmp_path / "sh")
    tiny = TINY_TRANSFORMER + ["--cpu", "--num-workers", "0", "--no-epoch-checkpoints", "--no-progress-bar",
                               "--max-tokens", "600", "--save-interval-updates", "2"]
    cmd = ["bash", os.path.join(REPO, "scripts", "train.sh"), "softmax", "multi30k"] + tiny
    env = {"DATA_BIN": tiny_bin, "SAVE_DIR": save}
    run(cmd + ["--max-update", "4"], env=env)
    last = os.path.join(save, "checkpoint_last.pt")
    _truncate(last)
    proc = run(cmd + ["--max-update", "6"], env=env)
    out = proc.stdout + proc.stderr
    assert f"{last} is unreadable" in out
    assert re.search(r"Loaded checkpoint \S+/checkpoint_best.pt \(epoch \d+ @ 4 updates\)", out)


# ---- the same checks through fairseq-hydra-train ----------------------------------------------------------------
@pytest.mark.parametrize("config, overrides, message", [
    ("tied", ["+model.joint_dim=2048"], "--joint-dim needs --output-layer joint; --output-layer tied would ignore it"),
    ("softmax", ["model.output_layer=continuous", "+model.target_vectors=VEC"],
     "--criterion label_smoothed_cross_entropy scores a softmax over the vocabulary, but --output-layer continuous"),
])
def test_hydra_options_and_criterion(tiny_bin, vectors, tmp_path, config, overrides, message):
    proc = run([tool("fairseq-hydra-train"), "--config-dir", os.path.join(REPO, "configs", "multi30k"),
                "--config-name", config, f"common.user_dir={USER_DIR}",
                f"task.data={tiny_bin}", "common.cpu=true", "optimization.max_update=1", "dataset.num_workers=0",
                f"checkpoint.save_dir={tmp_path}/save", f"hydra.run.dir={tmp_path}/hydra"]
               + [o.replace("VEC", vectors[0]) for o in overrides], check=False)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr[-3000:]
    assert "examples" not in proc.stdout + proc.stderr
