"""scripts/bench_continuous.py on tiny sizes: what it times is the real loss (checked against float64 / mpmath
references computed here), chunking does not change it, the fairseq-built models train and decode at the
forced length, and the results writer produces the expected rows and verdicts. No timing is asserted."""
import math
from argparse import Namespace

import mpmath
import pytest
import torch
import torch.nn.functional as F

from fairseq_outlayers.lab.bench import benchlib
from fairseq_outlayers.lab.bench.continuous_layer import (GiB, MiB, choose_chunks, layer_step, make_criterion,
                                                          make_dictionary, make_layer, make_sample,
                                                          softmax_peak_model)
from fairseq_outlayers.lab.bench.continuous_loss_timing import count_loss_ops, loss_variants
from fairseq_outlayers.lab.bench.continuous_models import (build, decode_batch, decode_generator, run_decode_benchmark,
                                                           run_model_benchmark, synthetic_batch, write_model_data)
from fairseq_outlayers.lab.bench.continuous_probes import probe_in_subprocess, summarise_layer
from fairseq_outlayers.lab.bench.continuous_tables import layer_tables, model_tables, target_verdicts
from harness import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_continuous.py")


V, H, N, M = 500, 32, 64, 300


def _setup(method):
    dictionary = make_dictionary(V)
    model = make_layer(method, V, H, M, dictionary, "cpu")
    criterion = make_criterion(method, dictionary)
    features, target = make_sample(V, H, N, dictionary, "cpu")
    return model, criterion, features, target


def _log_cm_mpmath(kappa, m):
    nu = mpmath.mpf(m) / 2 - 1
    return float(nu * mpmath.log(kappa) - mpmath.mpf(m) / 2 * mpmath.log(2 * mpmath.pi)
                 - mpmath.log(mpmath.besseli(nu, kappa)))


def test_softmax_loss_is_fairseq_cross_entropy():
    model, criterion, features, target = _setup("softmax")
    assert type(criterion).__name__ == "CrossEntropyCriterion"
    loss, fwd, bwd = layer_step(model, criterion, features, target)
    weight = model.decoder.output_projection.weight.detach().double()
    x = features.detach().double().requires_grad_(True)
    ref = F.cross_entropy(x @ weight.T, target, reduction="sum")
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-5)
    torch.testing.assert_close(features.grad.double(), x.grad, rtol=1e-4, atol=1e-6)
    assert fwd > 0 and bwd > 0


def test_vmf_nll_loss_is_the_default_criterion_with_exact_log_cm():
    model, criterion, features, target = _setup("vmf_nll")
    assert type(criterion).__name__ == "VMFNLLCriterion" and criterion.variant == "released"
    loss, _, _ = layer_step(model, criterion, features, target)
    layer = model.decoder.output_projection
    e_hat = features.detach().double() @ layer.proj.weight.detach().double().T + layer.proj.bias.detach().double()
    vectors = layer.target_table.double()[target]
    kappa = e_hat.norm(dim=-1)
    cos = (e_hat * vectors).sum(-1) / (kappa * vectors.norm(dim=-1))
    # the released form: -log C_m(κ) + log(1 + κ)(λ - cos), λ = 0.2
    ref = sum(-_log_cm_mpmath(k, M) + math.log1p(k) * (0.2 - c)
              for k, c in zip(kappa.tolist(), cos.tolist()))
    assert loss == pytest.approx(ref, rel=1e-6)
    assert layer.proj.weight.grad is not None and features.grad is not None


def test_cosine_loss():
    model, criterion, features, target = _setup("cosine")
    loss, _, _ = layer_step(model, criterion, features, target)
    layer = model.decoder.output_projection
    e_hat = features.detach().double() @ layer.proj.weight.detach().double().T + layer.proj.bias.detach().double()
    ref = (1 - F.cosine_similarity(e_hat, layer.target_table.double()[target], dim=-1)).sum().item()
    assert loss == pytest.approx(ref, rel=1e-5)


def test_token_chunks_give_the_same_loss_and_gradients():
    model, criterion, features, target = _setup("softmax")
    whole, _, _ = layer_step(model, criterion, features, target, chunks=1)
    grads = (features.grad.clone(), model.decoder.output_projection.weight.grad.clone())
    benchlib.clear_grads(model, features)
    chunked, _, _ = layer_step(model, criterion, features, target, chunks=4)
    assert chunked == pytest.approx(whole, rel=1e-5)
    torch.testing.assert_close(features.grad, grads[0])
    torch.testing.assert_close(model.decoder.output_projection.weight.grad, grads[1], rtol=1e-4, atol=1e-5)


def test_chunking_and_peak_model():
    assert softmax_peak_model(4096, 50000, 512) == 3 * 4096 * 50000 * 4
    assert softmax_peak_model(4096, 300000, 1024, 2) == 3 * 2048 * 300000 * 4 + 300000 * 1024 * 4
    assert choose_chunks(4096, 50000, 1024, 11 * GiB) == 1
    assert choose_chunks(4096, 300000, 1024, 11 * GiB) == 2
    assert choose_chunks(4096, 300000, 1024, 7 * GiB) == 4


def test_probe_in_a_fresh_process():
    args = Namespace(tokens=N, continuous_dim=M, threads=1, device="cpu")
    probe = probe_in_subprocess(args, "vmf_nll", V, H, 1, 3)
    assert "error" not in probe, probe
    assert len(probe["times"]) == 3 and probe["peak_step_bytes"] >= 0
    assert probe["trained_params"] == H * M + M  # the continuous layer: d·m + m
    assert probe["buffer_bytes"] >= V * M * 4  # the frozen table
    row = summarise_layer([probe], "vmf_nll", V, H)
    assert row["n_steps"] == 2  # the memory-measured first step is not timed for continuous layers
    failed = probe_in_subprocess(args, "no_such_layer", V, H, 1, 1)
    assert "error" in failed
    assert "failed" in "\n".join(layer_tables([summarise_layer([failed], "softmax", V, H)],
                                                    [V], [H], N))


def test_fairseq_models_train_and_decode_at_the_forced_length(tmp_path):
    write_model_data(str(tmp_path), 60, 16)
    extra = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
             "--decoder-ffn-embed-dim", "32", "--encoder-layers", "1", "--decoder-layers", "1"]
    built = {name: build(str(tmp_path), "outlayers_transformer_tiny", name, extra)
             for name in ("softmax", "continuous")}
    assert type(built["softmax"][2]).__name__ == "CrossEntropyCriterion"
    assert type(built["continuous"][2]).__name__ == "VMFNLLCriterion"
    assert type(built["continuous"][1].decoder.output_projection).__name__ == "ContinuousOutput"
    args = Namespace(train_steps=1, train_sentences=3, train_len=5, beams=[1, 5], decode_len=4,
                     decode_sentences=2, decode_reps=1)
    train = run_model_benchmark(args, built, log=lambda *a, **k: None)
    assert set(train) == {"softmax", "continuous"} and all(r["tok_s"] > 0 for r in train.values())
    # softmax: 16·60 output weights; continuous: 16·16 + 16 (the table is frozen)
    assert train["softmax"]["params"] - train["continuous"]["params"] == 16 * 60 - (16 * 16 + 16)
    decode = run_decode_benchmark(args, built, log=lambda *a, **k: None)  # raises on a wrong length
    assert set(decode) == {1, 5}
    gen = decode_generator(built["continuous"][0], built["continuous"][1], 5, 7)
    sample = synthetic_batch(built["continuous"][0].source_dictionary, 2, 4, 2, seed=0)
    hypos = decode_batch(built["continuous"][0], built["continuous"][1], gen, sample)
    assert [len(h[0]["tokens"]) for h in hypos] == [8, 8]


def _row(method, vocab, dim, total, peak, chunks=1):
    return {"method": method, "vocab": vocab, "dim": dim, "tokens": 4096, "chunks": chunks, "loss": 0.0,
            "trained_params": 10, "param_bytes": 0, "buffer_bytes": 0, "grad_bytes": 0, "adam_state_bytes": 0,
            "fwd": total / 2, "bwd": total / 2, "total": total, "n_steps": 3, "n_probes": 3,
            "peak_step_bytes": peak, "peak_total_bytes": peak}


def test_results_writer():
    rows = [_row("softmax", 50000, 512, 10.0, 100 * MiB), _row("vmf_nll", 50000, 512, 0.05, 2 * MiB),
            _row("cosine", 50000, 512, 0.04, 4 * MiB),
            _row("softmax", 300000, 512, 40.0, 1000 * MiB, chunks=2),
            _row("vmf_nll", 300000, 512, 0.1, 10 * MiB), _row("cosine", 300000, 512, 0.08, 10 * MiB)]
    lines = layer_tables(rows, [50000, 300000], [512], 4096)
    flops = 6 * 4096 * 512 * 50000 / 10.0 / 1e9  # 6 N H V over the 10 s step
    assert "| 50000 | 512 | softmax + cross_entropy | 1 | 5000.0 | 5000.0 | 10000.0 | 3 | 100.0 | 2343.8 | 10 | 0.0 " \
           f"| 100.0 | {flops:,.1f} |" in lines
    assert "| 50000 | 512 | 200.0x | 250.0x | 0.0200 | 0.0200 | 0.0400 | 1.25x |" in lines
    full = softmax_peak_model(4096, 300000, 512, 1)
    assert (f"| 300000 | 512 | 400.0x | 500.0x | 0.0100 (chunked); {10 * MiB / full:.4f} (full) | "
            f"0.0100 (chunked); {10 * MiB / full:.4f} (full) | 0.0100 (chunked); "
            f"{10 * MiB / full:.4f} (full) | 1.25x |") in lines
    verdicts = target_verdicts(rows, [50000, 300000], [512])
    assert verdicts[0] == "- vmf_nll fwd+bwd speed-up >= 100x at V = 50000: 200.0x at H = 512 -> **met**"
    assert verdicts[1] == "- vmf_nll fwd+bwd speed-up >= 500x at V = 300000: 400.0x at H = 512 -> **not met**"
    assert verdicts[2].endswith("0.0100 total / 0.0100 step at H = 512 -> **met**")
    train = {"tiny": {"softmax": {"step": 2.0, "tok_s": 1000.0, "params": 5, "desc": "d"},
                      "continuous": {"step": 1.25, "tok_s": 1600.0, "params": 3, "desc": "d"}}}
    decode = {"tiny": {1: {"softmax": {"batch": 1.0, "sent_s": 32.0}, "continuous": {"batch": 0.5, "sent_s": 64.0}}}}
    text = "\n".join(model_tables(train, decode, None))
    assert "| tiny | continuous | 3 | 1250.0 | 1600 | 1.60 |  |" in text
    assert "- tiny: whole-model training tokens/s >= 2x softmax: 1.60x -> **not met**" in text
    assert "| tiny | 1 | continuous | 0.500 | 64.0 | 2.00 |" in text
    assert math.isnan(benchlib.ratio(1.0, 0))


def test_output_exists_is_refused_before_any_work(bench, tmp_path):
    out = tmp_path / "r.md"
    out.write_text("old")
    skip = ["--skip", "loss", "--skip", "layer", "--skip", "model"]
    with pytest.raises(SystemExit, match="exists; choose another path or pass --force"):
        bench.main(skip + ["--output", str(out)])
    assert out.read_text() == "old"
    assert bench.main(skip + ["--output", str(out), "--force"]) == 0
    assert out.read_text().startswith("#") and not list(tmp_path.glob(".r.md.*"))


def test_loss_part_counts_and_times_every_variant(bench, tmp_path):
    """Part 0 on a tiny batch: every vmf_nll variant and cosine, the profiler's counts, the ratio table and the
    two verdicts (the operations target is the pinned one of tests/test_vmf.py; time is not asserted)."""
    out = tmp_path / "loss.md"
    assert bench.main(["--skip", "layer", "--skip", "model", "--tokens", "32", "--loss-reps", "2",
                       "--output", str(out)]) == 0
    text = out.read_text()
    names = [name for name, _ in loss_variants()]
    assert names[:2] == ["cosine", "vmf released (default)"] and len(names) == 7
    for name in names:
        assert f"| {name} | " in text
    assert "| cosine | " in text and "| 1.00x | " in text
    assert "- every vMF variant <= 2x the cosine loss's aten operations: worst " in text
    assert "operations: worst" in text and "-> **met**" in text.split("aten operations: worst")[1].splitlines()[0]
    rows = {name: count_loss_ops(fn, torch.randn(8, 300, requires_grad=True),
                                       F.normalize(torch.randn(8, 300), dim=-1))
            for name, fn in loss_variants()[:2]}
    assert rows["cosine"][1] is None and rows["vmf released (default)"][0] <= 2 * rows["cosine"][0]
