"""Shared-private bilingual embeddings (Liu et al. 2019): parameter counts, special cases, gradients, no stale
assembly after updates, and the method through fairseq-train / fairseq-generate."""
import os
import re
import shutil

import pytest
import torch

from fairseq_outlayers.methods.shared_private.embedding import (SharedPrivateEmbedding, SharedPrivateEmbeddings, closed_form_numel,
                                                      shared_width)
from harness import REPO, TINY_LSTM, TINY_TRANSFORMER, generate, logged_losses, train

# source indices 4..9 and target indices 4..10 (0-3 are fairseq's specials); one source word left unpaired
PAIRS = {"lm": ([4, 6, 9], [5, 4, 8]), "wf": ([5], [5 + 5]), "ur": ([7, 8], [6, 7])}
V_SRC, V_TGT, DIM = 11, 12, 10


def _core(lambdas=(0.9, 0.7, 0.5), dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    core = SharedPrivateEmbeddings(V_SRC, V_TGT, DIM, PAIRS, lambdas, src_padding_idx=1, tgt_padding_idx=1)
    return core.to(dtype)


def test_parameter_count_closed_form():
    core = _core()
    counts = {c: len(PAIRS[c][0]) for c in PAIRS}
    widths = [shared_width(l, DIM) for l in (0.9, 0.7, 0.5)]
    assert widths == [9, 7, 5]
    expected = (V_SRC + V_TGT) * DIM - (3 * 9 + 1 * 7 + 2 * 5)
    assert sum(p.numel() for p in core.parameters()) == expected == closed_form_numel(counts, (0.9, 0.7, 0.5),
                                                                                         V_SRC, V_TGT, DIM)


def test_paper_reduction_rate_nist_zh_en():
    """Table 1/5 of the paper: 30K + 30K words, d = 512, 21,172 / 11 / 8,817 pairs -> 18.7M, 59.4% fewer than
    vanilla (source, target and output matrices: 46.1M); decoder WT 30.7M (33.3%)."""
    counts = {"lm": 21172, "wf": 11, "ur": 8817}
    emb = closed_form_numel(counts, (0.9, 0.7, 0.5), 30000, 30000, 512)
    vanilla, decoder_wt = 3 * 30000 * 512, 2 * 30000 * 512
    assert emb == 18_698_618
    assert round(emb / 1e6, 1) == 18.7 and round(100 * (1 - emb / vanilla), 1) == 59.4
    assert round(decoder_wt / 1e6, 1) == 30.7
    assert closed_form_numel(counts, (0, 0, 0), 30000, 30000, 512) == decoder_wt
    # Table 4, lambda = (1, 1, 1): every word paired shares its whole vector; the paper prints 15.3M (truncated)
    assert closed_form_numel(counts, (1, 1, 1), 30000, 30000, 512) == 30000 * 512 == 15_360_000


def test_lambda_one_shares_whole_vectors_and_zero_shares_nothing():
    core = _core((1, 1, 1))
    ex, ey = core.matrix("src"), core.matrix("tgt")
    for c, (si, ti) in PAIRS.items():
        assert torch.equal(ex[si], ey[ti])
    assert not torch.equal(ex[10], ey[9])  # unpaired rows are private
    core0 = _core((0, 0, 0))
    assert sum(p.numel() for p in core0.parameters()) == (V_SRC + V_TGT) * DIM
    ex0, ey0 = core0.matrix("src"), core0.matrix("tgt")
    for c, (si, ti) in PAIRS.items():
        assert not torch.isclose(ex0[si], ey0[ti]).any()
    assert torch.all(ex0[1] == 0) and torch.all(ey0[1] == 0)  # padding rows start at zero


def test_partial_sharing_layout():
    core = _core()
    ex, ey = core.matrix("src"), core.matrix("tgt")
    for c, k in zip(("lm", "wf", "ur"), (9, 7, 5)):
        si, ti = PAIRS[c]
        assert torch.equal(ex[si, :k], ey[ti, :k])  # the first lambda_c * d features are one vector
        assert not torch.isclose(ex[si, k:], ey[ti, k:]).any()


def test_gradient_of_shared_feature_reaches_both_rows():
    core = _core(dtype=torch.float64)
    a, b = torch.randn(DIM, dtype=torch.float64), torch.randn(DIM, dtype=torch.float64)
    src = SharedPrivateEmbedding(core, "src", 1)
    tgt = SharedPrivateEmbedding(core, "tgt", 1)
    x, y = PAIRS["lm"][0][1], PAIRS["lm"][1][1]  # the second lm pair: source 6 <-> target 4
    loss = src(torch.tensor([x])) @ a + tgt(torch.tensor([y])) @ b
    loss.sum().backward()
    k = 9
    assert torch.allclose(core.shared[0].grad[1], a[:k] + b[:k], atol=1e-12)
    assert torch.allclose(core.src_private[0].grad[1], a[k:]) and torch.allclose(core.tgt_private[0].grad[1], b[k:])
    assert core.shared[0].grad[0].abs().sum() == 0 and core.shared[1].grad.abs().sum() == 0


def test_assembly_follows_every_update_and_gradient_accumulation():
    core = _core()
    core.train()
    tgt = SharedPrivateEmbedding(core, "tgt", 1)
    tokens = torch.tensor([[4, 5, 10]])
    w1 = tgt.weight
    (tgt(tokens).sum() + (tgt.weight ** 2).sum()).backward()
    used = [p for p in core.parameters() if p.grad is not None]  # the target side's blocks
    assert len(used) == 7
    g1 = [p.grad.clone() for p in used]
    w2 = tgt.weight  # assembled again: same values, no error on a second backward
    assert torch.equal(w1, w2)
    (tgt(tokens).sum() + (tgt.weight ** 2).sum()).backward()  # --update-freq 2
    for g, p in zip(g1, used):
        assert torch.allclose(p.grad, 2 * g)
    torch.optim.SGD(core.parameters(), lr=0.1).step()
    assert not torch.equal(tgt.weight, w2)
    core.eval()
    with torch.no_grad():
        w3 = tgt.weight
        state = {k: v + 1 if v.is_floating_point() else v for k, v in core.state_dict().items()}
        core.load_state_dict(state)
        assert torch.allclose(tgt.weight, w3 + 1)


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("grad", [True, False])
def test_no_stale_embeddings_after_writes_through_data(mode, grad):
    """A pass (source lookup first, as every encoder-decoder pass) without a backward, then the parameters changed
    in place through ``.data`` (what fairseq's optimizers do; ``_version`` does not move): the next pass sees the
    new values on both sides. Within one pass the target matrix is assembled once."""
    from fairseq_outlayers.methods.shared_private.embedding import assemble

    core = _core()
    getattr(core, mode)()
    src, tgt = SharedPrivateEmbedding(core, "src", 1), SharedPrivateEmbedding(core, "tgt", 1)
    tokens = torch.tensor([[4, 5, 10, 1]])
    for _ in range(2):
        with torch.set_grad_enabled(grad):
            src(tokens), tgt(tokens), tgt.weight  # a pass, no backward
        for p in core.parameters():
            p.data.add_(0.25)
        with torch.no_grad():
            fresh_tgt = assemble(list(core.shared), list(core.tgt_private), core.tgt_unpaired, core.tgt_rows)
            fresh_src = assemble(list(core.shared), list(core.src_private), core.src_unpaired, core.src_rows)
        with torch.set_grad_enabled(grad):
            assert torch.equal(src(tokens), fresh_src[tokens])  # the next pass
            weight = tgt.weight
            assert torch.equal(weight, fresh_tgt) and torch.equal(tgt(tokens), fresh_tgt[tokens])
            assert tgt.weight is weight  # once per pass: input lookup and tied output layer share it


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_model_forward_after_writes_through_data_is_fresh(tiny_bin, tiny_pairing, mode):
    """The same through a whole model: a forward without a backward, an optimizer-like write through ``.data``, and
    the next forward equals that of a model freshly loaded with the new weights."""
    task, model = _build(tiny_bin, ["--output-layer", "tied", "--embeddings", "shared-private", "--pairing",
                                    tiny_pairing, "--dropout", "0"])
    _, fresh = _build(tiny_bin, ["--output-layer", "tied", "--embeddings", "shared-private", "--pairing",
                                 tiny_pairing, "--dropout", "0"])
    src = torch.randint(4, len(task.source_dictionary), (2, 5))
    prev = torch.randint(4, len(task.target_dictionary), (2, 4))
    lengths = torch.full((2,), 5)
    getattr(model, mode)(), getattr(fresh, mode)()
    with torch.no_grad() if mode == "eval" else torch.enable_grad():
        model(src, lengths, prev)
        for p in model.parameters():
            p.data.mul_(1.5)
        fresh.load_state_dict(model.state_dict())
        assert torch.equal(model(src, lengths, prev)[0], fresh(src, lengths, prev)[0])


def test_state_dict_keys_are_the_release_ones(tiny_bin, tiny_pairing):
    """Checkpoints of release 2026-11 load only while the embeddings' keys stay as they are."""
    _, model = _build(tiny_bin, ["--output-layer", "tied", "--embeddings", "shared-private", "--pairing", tiny_pairing])
    names = [f"shared.{i}" for i in range(3)] + [f"{s}_private.{i}" for s in ("src", "tgt") for i in range(3)] + [
        "src_rows", "src_unpaired", "tgt_rows", "tgt_unpaired"]
    expected = [f"{side}.embed_tokens.core.{n}" for side in ("encoder", "decoder") for n in names]
    keys = [k for k in model.state_dict() if ".layers." not in k and "layer_norm" not in k]
    assert sorted(keys) == sorted(expected + ["decoder.version", "encoder.version"])


def test_bad_lambdas_and_non_one_to_one():
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        SharedPrivateEmbeddings(V_SRC, V_TGT, DIM, PAIRS, (0.9, 1.5, 0.5))
    with pytest.raises(ValueError, match="one-to-one"):
        SharedPrivateEmbeddings(V_SRC, V_TGT, DIM, {"lm": ([4, 4], [5, 6])})
    with pytest.raises(ValueError, match="padding index"):
        SharedPrivateEmbeddings(V_SRC, V_TGT, DIM, {"lm": ([1], [5])}, src_padding_idx=1)


# --------------------------------------------------------------------------------------------------------
# the model: lambda = 0 is decoder weight tying, exactly


def _build(bin_dir, extra):
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [bin_dir, "--cpu"] + TINY_TRANSFORMER + extra)
    task = tasks.setup_task(args)
    return task, task.build_model(args)


@pytest.fixture(scope="module")
def tiny_pairing(tiny_raw, tiny_bin, tmp_path_factory):
    from harness import pairing_file

    return pairing_file(tiny_raw, tiny_bin, str(tmp_path_factory.mktemp("pairing") / "pairs.txt"))


def test_lambda_zero_equals_decoder_weight_tying(tiny_bin, tiny_pairing):
    task, tied = _build(tiny_bin, ["--output-layer", "tied"])
    _, sp = _build(tiny_bin, ["--output-layer", "tied", "--embeddings", "shared-private", "--pairing", tiny_pairing,
                              "--shared-private-lambdas", "0,0,0"])
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(tied) == count(sp)
    # give the shared-private model the tied model's weights: every row is private, so the blocks are slices
    core = sp.encoder.embed_tokens.core
    with torch.no_grad():
        for side, full in (("src", tied.encoder.embed_tokens.weight), ("tgt", tied.decoder.embed_tokens.weight)):
            rows = core.src_rows if side == "src" else core.tgt_rows
            stacked = full[torch.argsort(rows)]
            blocks = list(core.src_private if side == "src" else core.tgt_private)
            blocks.append(core.src_unpaired if side == "src" else core.tgt_unpaired)
            start = 0
            for block in blocks:
                block.copy_(stacked[start:start + block.shape[0]])
                start += block.shape[0]
        sp_state = sp.state_dict()
        for key, value in tied.state_dict().items():
            if "embed_tokens" not in key:
                sp_state[key].copy_(value)
    tied.eval(), sp.eval()
    src = torch.tensor([[4, 5, 6, 2], [1, 7, 8, 2]])
    prev = torch.tensor([[2, 4, 5, 6], [2, 9, 10, 1]])
    with torch.no_grad():
        a = tied(src, torch.tensor([4, 3]), prev)[0]
        b = sp(src, torch.tensor([4, 3]), prev)[0]
    assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()
    assert torch.equal(sp.decoder.output_projection.tied_embedding.weight, tied.decoder.embed_tokens.weight)


# --------------------------------------------------------------------------------------------------------
# end to end: pairing tool -> fairseq-train -> fairseq-generate (the pairing file is not needed to generate)


@pytest.mark.parametrize("arch_args", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
def test_train_then_generate_without_pairing_file(tiny_bin, tiny_pairing, tmp_path, arch_args):
    pairing = str(tmp_path / "pairs.txt")
    shutil.copy(tiny_pairing, pairing)
    save = str(tmp_path / "ckpt")
    proc = train(tiny_bin, save, arch_args, ["--embeddings", "shared-private", "--output-layer", "tied",
                                             "--pairing", pairing], max_update=6)
    log = proc.stdout + proc.stderr
    losses = logged_losses(log)
    assert len(losses) == 6 and losses[-1] < losses[0], losses
    from fairseq_outlayers.methods.shared_private.word_pairs import read_pairing

    counts = read_pairing(pairing).counts()
    expected = closed_form_numel(counts, (0.9, 0.7, 0.5), 48, 48, 32)
    assert re.search(rf"embedding\s+{expected:,d}\s", log), "parameter report does not match the closed form"
    ckpt = os.path.join(save, "checkpoint_last.pt")
    state = torch.load(ckpt, map_location="cpu")
    assert "encoder.embed_tokens.core.src_rows" in state["model"]
    assert "decoder.output_projection.weight" not in state["model"]  # tied to the assembled target matrix
    os.remove(pairing)  # generation rebuilds the model from the checkpoint alone
    if arch_args is TINY_TRANSFORMER:  # (the LSTM decodes through the same output layer; one run is enough)
        _, hyps = generate(tiny_bin, ckpt)
        assert len(hyps) == 24
        # the Figure-6 analysis reads the checkpoint alone: paired vectors are closer than mismatched ones
        import importlib.util

        spec = importlib.util.spec_from_file_location("pca", os.path.join(REPO, "scripts", "shared_private_pca.py"))
        pca = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(pca)
        svg = str(tmp_path / "pca.svg")
        paired, mismatched = pca.main([ckpt, "--data", tiny_bin, "--top", "8", "-o", svg])
        assert paired < mismatched and open(svg).read().count("<circle") == 16


def test_configuration_errors(tiny_bin, tiny_bin_joined, tiny_pairing, tmp_path):
    from fairseq_outlayers.errors import OutlayersConfigError

    vectors = str(tmp_path / "vectors.txt")
    with open(vectors, "w") as f:
        f.write("0 32\n")  # a word2vec text header and no vectors
    cases = [
        (tiny_bin, ["--output-layer", "tied"], "needs --pairing PATH"),
        (tiny_bin_joined, ["--output-layer", "tied", "--pairing", tiny_pairing], "is not the one"),
        (tiny_bin, ["--output-layer", "tied", "--pairing", tiny_pairing, "--shared-private-lambdas", "0.9,2,0.5"],
         "three numbers in [0, 1]"),
        (tiny_bin_joined, ["--output-layer", "tied-all", "--pairing", tiny_pairing], "three-way tying"),
        (tiny_bin, ["--output-layer", "tied", "--pairing", tiny_pairing, "--decoder-embed-path", vectors],
         "--decoder-embed-path loads or freezes a plain embedding matrix"),
    ]
    for bin_dir, extra, message in cases:
        with pytest.raises(OutlayersConfigError) as err:
            _build(bin_dir, ["--embeddings", "shared-private"] + extra)
        assert message in str(err.value)
    # through the real CLI: one line, no traceback
    proc = train(tiny_bin, str(tmp_path / "x"), extra=["--embeddings", "shared-private", "--output-layer", "softmax",
                                                       "--pairing", tiny_pairing], check=False, cli="outlayers-train")
    assert proc.returncode != 0 and "use --output-layer tied" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------------------------------------
# slow: data parallelism and fairseq-hydra-train


@pytest.mark.slow
def test_data_parallel_two_processes_match_single_process(tiny_bin, tiny_pairing, tmp_path):
    """Two gloo workers with half the batch each end where one process with --update-freq 2 ends (the shared
    blocks are registered under the encoder and the decoder; their gradients are reduced once)."""
    from harness import train_distributed

    extra = ["--embeddings", "shared-private", "--output-layer", "tied", "--pairing", tiny_pairing,
             "--required-batch-size-multiple", "1"]
    train(tiny_bin, str(tmp_path / "one"), extra=extra + ["--update-freq", "2"], max_update=3)
    train_distributed(tiny_bin, str(tmp_path / "two"), extra=extra, max_update=3)
    a = torch.load(os.path.join(tmp_path / "one", "checkpoint_last.pt"), map_location="cpu")["model"]
    b = torch.load(os.path.join(tmp_path / "two", "checkpoint_last.pt"), map_location="cpu")["model"]
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key].float(), b[key].float(), atol=1e-5, rtol=1e-4), key


@pytest.mark.slow
def test_hydra_train_then_generate(tiny_bin, tiny_pairing, tmp_path):
    from harness import USER_DIR, run, tool

    save = str(tmp_path / "hydra")
    run([tool("fairseq-hydra-train"), "--config-dir", os.path.join(REPO, "configs", "multi30k"),
         "--config-name", "softmax", f"common.user_dir={USER_DIR}", f"task.data={tiny_bin}",
         "common.cpu=true", "model.output_layer=tied", "+model.embeddings=shared-private",
         f"+model.pairing={tiny_pairing}", "+model.shared_private_lambdas='0.9,0.7,0.5'", "+model.encoder_layers=1",
         "+model.decoder_layers=1", "+model.encoder_embed_dim=32", "+model.decoder_embed_dim=32",
         "+model.encoder_ffn_embed_dim=64", "+model.decoder_ffn_embed_dim=64", "optimization.max_update=3",
         "dataset.max_tokens=600", "dataset.num_workers=0", f"checkpoint.save_dir={save}",
         f"hydra.run.dir={tmp_path}/hydra_out"])
    state = torch.load(os.path.join(save, "checkpoint_last.pt"), map_location="cpu")
    assert "encoder.embed_tokens.core.src_rows" in state["model"]
    _, hyps = generate(tiny_bin, os.path.join(save, "checkpoint_last.pt"))
    assert len(hyps) == 24


def test_identical_pairing_is_three_way_sharing(tiny_bin, tiny_bin_joined, tmp_path):
    """--identical (joined dictionary) with lambda_wf = 1: every non-special word has one vector for source,
    target and output, i.e. three-way tying (Press & Wolf 2017) with private special symbols."""
    from fairseq_outlayers.tools.pairing.__main__ import main

    path = str(tmp_path / "identical.txt")
    joined = os.path.join(tiny_bin_joined, "dict.de.txt")
    assert main(["--identical", "--src-dict", joined, "--tgt-dict", joined, "-o", path]) == 0
    _, model = _build(tiny_bin_joined, ["--output-layer", "tied", "--embeddings", "shared-private", "--pairing", path,
                                        "--shared-private-lambdas", "0,1,0"])
    n, d = len(model.encoder.dictionary), 32
    assert sum(p.numel() for p in model.encoder.embed_tokens.parameters()) == n * d + 4 * d  # 4 private specials
    ex, ey = model.encoder.embed_tokens.weight, model.decoder.embed_tokens.weight
    assert torch.equal(ex[4:], ey[4:]) and not torch.equal(ex[:4], ey[:4])
    separate = os.path.join(tiny_bin, "dict.de.txt"), os.path.join(tiny_bin, "dict.en.txt")
    assert main(["--identical", "--src-dict", separate[0], "--tgt-dict", separate[1], "-o", path + "2"]) == 1
