"""``--criterion fused_cross_entropy``: fairseq's label-smoothed cross-entropy without the N x V logits."""
import os

import pytest
import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.losses.linear_cross_entropy import chunked_argmax, linear_cross_entropy, torch_rows
from harness import TINY_LSTM, TINY_TRANSFORMER, USER_DIR, generate, layer_data, logged_losses, softmax_layers, train

SOFTMAX_LAYERS = softmax_layers()
PAD = 1


def _problem(n=37, v=53, d=11, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64).requires_grad_()
    w = (torch.randn(v, d, generator=g, dtype=torch.float64) * 2).requires_grad_()
    b = torch.randn(v, generator=g, dtype=torch.float64).requires_grad_() if bias else None
    t = torch.randint(0, v, (n,), generator=g)
    t[::5] = PAD  # padding positions
    return x, w, b, t


def _grads(loss, tensors):
    return torch.autograd.grad(loss, [p for p in tensors if p is not None])


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("block", [1 << 22, 200, 1])  # one chunk; chunks of 3 rows; one row at a time
def test_equals_fairseq_label_smoothed_nll_loss_in_float64(eps, bias, block):
    x, w, b, t = _problem(bias=bias)
    ref_loss, ref_nll = label_smoothed_nll_loss(F.log_softmax(F.linear(x, w, b), -1), t, eps, ignore_index=PAD)
    loss, nll = linear_cross_entropy(x, w, b, t, eps, ignore_index=PAD, impl="torch", block_elements=block)
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss, ref_loss.squeeze(), rtol=1e-5, atol=0)
    torch.testing.assert_close(nll, ref_nll.squeeze(), rtol=1e-5, atol=0)
    tensors = (x, w, b)
    for got, want in zip(_grads(loss, tensors), _grads(ref_loss, tensors)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-12)


def test_unreduced_values_and_padding_positions():
    x, w, b, t = _problem()
    ref_loss, ref_nll = label_smoothed_nll_loss(F.log_softmax(F.linear(x, w, b), -1), t, 0.1, ignore_index=PAD,
                                                reduce=False)
    loss, nll = linear_cross_entropy(x, w, b, t, 0.1, ignore_index=PAD, reduce=False, impl="torch",
                                     block_elements=200)
    assert loss.shape == t.shape and bool((loss[t == PAD] == 0).all())
    torch.testing.assert_close(loss, ref_loss.squeeze(-1), rtol=1e-5, atol=1e-12)
    torch.testing.assert_close(nll, ref_nll.squeeze(-1), rtol=1e-5, atol=1e-12)


def test_argmax_and_frozen_matrix():
    """The argmax an accuracy needs; a frozen (buffer) matrix gets no gradient."""
    x, w, b, t = _problem(v=700)
    logits = F.linear(x, w, b)
    assert torch.equal(chunked_argmax(x, w, b, block_elements=1500), logits.argmax(-1))  # chunks of 2 rows
    loss, _ = linear_cross_entropy(x, w.detach(), b, t, 0.1, ignore_index=PAD, block_elements=1500)
    ref, _ = label_smoothed_nll_loss(F.log_softmax(logits, -1), t, 0.1, ignore_index=PAD)
    for got, want in zip(torch.autograd.grad(loss, [x, b]), torch.autograd.grad(ref, [x, b])):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_without_gradients_as_in_validation():
    x, w, b, t = _problem()
    ref, ref_nll = label_smoothed_nll_loss(F.log_softmax(F.linear(x, w, b), -1), t, 0.1, ignore_index=PAD)
    with torch.no_grad():
        loss, nll = linear_cross_entropy(x, w, b, t, 0.1, ignore_index=PAD)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-10, atol=0)
    torch.testing.assert_close(nll, ref_nll, rtol=1e-10, atol=0)


def test_half_precision_inputs_are_computed_in_float32():
    x, w, b, t = _problem()
    loss, nll = linear_cross_entropy(x.detach().bfloat16(), w.detach().bfloat16(), b.detach().bfloat16(), t, 0.1,
                                     ignore_index=PAD, impl="torch")
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    ref, _ = label_smoothed_nll_loss(F.log_softmax(F.linear(x, w, b), -1), t, 0.1, ignore_index=PAD)
    assert abs(float(loss) - float(ref.detach())) < 0.05 * abs(float(ref.detach()))  # bf16 inputs: 8 bits of mantissa


def test_chunks_stay_within_budget():
    assert torch_rows(8192, 256000, 1 << 24) == 65  # 16M logits
    assert torch_rows(10, 40, 1 << 22) == 10  # all rows at once
    assert torch_rows(8192, 256000, 1 << 10) == 1  # at least one row


# -- the criterion on real models ------------------------------------------------------------------------------------
def _setup(bin_dir, extra, arch=TINY_TRANSFORMER):
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [bin_dir, "--user-dir", USER_DIR, "--cpu", *arch, *extra])
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    model = task.build_model(args)
    task.load_dataset("train")
    itr = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=400).next_epoch_itr(shuffle=False)
    return task, model, next(itr)


#: options that exercise more of a layer (a bias, a smaller dimension); a layer not named here runs with its defaults
LAYER_OPTIONS = {
    "softmax": ["--output-layer", "softmax", "--output-bias"],
    "tied": ["--output-layer", "tied"],
    "tied-all": ["--output-layer", "tied-all", "--output-bias"],
    "joint": ["--output-layer", "joint", "--joint-dim", "24", "--joint-dropout", "0.1"],
    "fixed": ["--output-layer", "fixed", "--fixed-targets-dim", "16", "--fixed-targets-learned-scale",
              "--fixed-targets-bias", "0.5"],
}


def layer_options(layer):
    return LAYER_OPTIONS.get(layer, ["--output-layer", layer])


def _reference(model, sample, eps, pad):
    """fairseq's label_smoothed_cross_entropy on the full logits, kept in float64 (the output layers'
    get_normalized_probs would compute in float32)."""
    logits = model(**sample["net_input"])[0]
    target = model.get_targets(sample, None).reshape(-1)
    lprobs = F.log_softmax(logits, dim=-1).reshape(-1, logits.size(-1))
    loss, nll = label_smoothed_nll_loss(lprobs, target, eps, ignore_index=pad)
    mask = target.ne(pad)
    n_correct = int(lprobs.argmax(1).masked_select(mask).eq(target.masked_select(mask)).sum())
    return loss, {"nll_loss": nll.detach(), "n_correct": n_correct, "total": int(mask.sum())}


@pytest.mark.parametrize("arch", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
@pytest.mark.parametrize("layer", SOFTMAX_LAYERS)
def test_criterion_equals_label_smoothed_cross_entropy(tiny_bin, tiny_bin_joined, layer, arch):
    """Every softmax-type layer (with its bias, projection, scale, dropout): loss, nll_loss, accuracy and every
    parameter's gradient equal fairseq's label-smoothed cross-entropy, in float64, within 1e-5 relative."""
    from fairseq_outlayers.losses.fused_cross_entropy import FusedCrossEntropyCriterion

    task, model, sample = _setup(layer_data(layer, tiny_bin, tiny_bin_joined), layer_options(layer), arch)
    model.double().train()
    crit = FusedCrossEntropyCriterion(task, False, 0.1, report_accuracy=True, fused_impl="torch",
                                      fused_block_elements=97)
    results = []
    for run in (lambda: _reference(model, sample, 0.1, task.target_dictionary.pad()),
                lambda: (lambda out: (out[0], out[2]))(crit(model, sample))):
        model.zero_grad()
        torch.manual_seed(5)  # the same dropout masks
        loss, log = run()
        loss.backward()
        results.append((loss.detach(), log, {n: p.grad.clone() for n, p in model.named_parameters()
                                             if p.grad is not None}))
    (ref, ref_log, ref_grads), (got, log, grads) = results
    assert got.dtype == torch.float64
    assert log["total"] == ref_log["total"] and log["n_correct"] == ref_log["n_correct"]
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=0)
    torch.testing.assert_close(log["nll_loss"], ref_log["nll_loss"], rtol=1e-5, atol=0)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-5, atol=1e-9, msg=name)


def test_layers_without_a_matrix_are_refused(tiny_bin, tmp_path):
    import torch.nn as nn

    from fairseq_outlayers.losses.fused_cross_entropy import logit_factors

    model = nn.Module()
    model.decoder = nn.Module()
    model.decoder.output_projection = nn.Identity()
    with pytest.raises(OutlayersConfigError, match="needs an output layer that is one .V, d. matrix .* 'Identity'"):
        logit_factors(model, torch.zeros(2, 3))
    # a continuous output layer is refused when the options are read, before any data
    proc = train(tiny_bin, str(tmp_path / "x"), extra=["--output-layer", "continuous", "--criterion",
                                                       "fused_cross_entropy"], check=False, cli="outlayers-train")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--criterion fused_cross_entropy scores a softmax over the vocabulary" in proc.stderr


def test_cce_asked_for_but_missing():
    from fairseq_outlayers.losses.fused_cross_entropy import FusedCrossEntropyCriterion
    from fairseq_outlayers.losses.linear_cross_entropy import cce_available

    if cce_available():
        pytest.skip("cut-cross-entropy is installed")
    with pytest.raises(OutlayersConfigError, match=r"--fused-impl cce needs the cut-cross-entropy package .*"
                       r"pip install 'fairseq_outlayers\[cce\]'"):
        FusedCrossEntropyCriterion(None, False, 0.0, fused_impl="cce")


def test_a_torch_without_linear_cross_entropy_is_refused_in_one_line(monkeypatch):
    from fairseq_outlayers.losses.fused_cross_entropy import FusedCrossEntropyCriterion

    monkeypatch.delattr(torch.nn.functional, "linear_cross_entropy")
    with pytest.raises(OutlayersConfigError, match=r"--fused-impl auto needs torch >= 2.13 .*pip install torch=="):
        FusedCrossEntropyCriterion(None, False, 0.0)


class FeaturesOnly(torch.nn.Module):
    """The least a model shows the criterion: zero features and a (7, 4) output projection."""

    def __init__(self):
        super().__init__()
        self.decoder = torch.nn.Module()
        self.decoder.output_projection = torch.nn.Linear(4, 7)

    def forward(self, src_tokens, features_only):
        return torch.zeros(1, 3, 4), None

    def get_targets(self, sample, net_output):
        return sample["target"]


def test_a_torch_without_linear_cross_entropy_and_cut_cross_entropy_installed(monkeypatch):
    """A CUDA torch older than 2.13 (install.sh keeps one from 2.1 on) with Cut Cross-Entropy: auto is accepted, as
    it takes the kernel on CUDA; where auto comes to torch's path (here the CPU) the first batch refuses in one
    line naming torch 2.13, and --fused-impl torch is refused when the criterion is built."""
    import sys

    from fairseq_outlayers.losses.fused_cross_entropy import FusedCrossEntropyCriterion

    monkeypatch.delattr(torch.nn.functional, "linear_cross_entropy")
    monkeypatch.setattr(sys.modules[FusedCrossEntropyCriterion.__module__], "cce_available", lambda: True)
    with pytest.raises(OutlayersConfigError, match=r"--fused-impl torch needs torch >= 2.13 "):
        FusedCrossEntropyCriterion(None, False, 0.0, fused_impl="torch")
    criterion = FusedCrossEntropyCriterion(None, False, 0.0)

    sample = {"net_input": {"src_tokens": None}, "target": torch.tensor([[2, 3, 4]]), "ntokens": 3}
    with pytest.raises(OutlayersConfigError) as error:
        criterion(FeaturesOnly(), sample)
    assert "\n" not in str(error.value)
    assert str(error.value).startswith("--criterion fused_cross_entropy --fused-impl auto needs torch >= 2.13 ")


def test_cut_cross_entropy_by_name_in_a_dtype_it_refuses_stops_at_the_first_batch(monkeypatch):
    """Cut Cross-Entropy's backward asserts bf16 or fp16 (H200, 2026-12-04). Asked for by name in float32, the
    first batch stops with one line naming the fix, before any backward."""
    import sys

    from fairseq_outlayers.losses.fused_cross_entropy import FusedCrossEntropyCriterion

    module = sys.modules[FusedCrossEntropyCriterion.__module__]
    monkeypatch.setattr(module, "cce_available", lambda: True)
    monkeypatch.setattr(module, "check_cce", lambda device, dtype: "AssertionError: Backwards requires embeddings "
                        "to be bf16 or fp16" if dtype == torch.float32 else None)
    criterion = FusedCrossEntropyCriterion(None, False, 0.0, fused_impl="cce")

    sample = {"net_input": {"src_tokens": None}, "target": torch.tensor([[2, 3, 4]]), "ntokens": 3}
    with pytest.raises(OutlayersConfigError) as error:
        criterion(FeaturesOnly(), sample)
    assert str(error.value) == (
        "--fused-impl cce fails its check on cpu in torch.float32 (AssertionError: Backwards requires embeddings to "
        "be bf16 or fp16); train with --bf16 or --fp16, or use --fused-impl auto (it falls back to torch's path)")


# -- through fairseq's CLIs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", SOFTMAX_LAYERS)
def test_fairseq_train_and_generate(tiny_bin, tiny_bin_joined, tmp_path, layer):
    """fairseq-train --user-dir through the criterion for a few updates, with label smoothing and accuracy, then
    fairseq-generate on the checkpoint."""
    bin_dir = layer_data(layer, tiny_bin, tiny_bin_joined)
    save = str(tmp_path / "ckpt")
    proc = train(bin_dir, save, extra=layer_options(layer) + [
        "--criterion", "fused_cross_entropy", "--label-smoothing", "0.1", "--report-accuracy"], max_update=3)
    out = proc.stdout + proc.stderr
    losses = logged_losses(out)
    assert len(losses) == 3 and all(v == v for v in losses), losses
    assert "fused_cross_entropy: torch implementation" in out
    valid = out.split("valid on 'valid' subset")[1].splitlines()[0]
    assert " nll_loss " in valid and " ppl " in valid and " accuracy " in valid
    _, hyps = generate(bin_dir, os.path.join(save, "checkpoint_last.pt"))
    assert len(hyps) == 24


# -- on a CUDA GPU ---------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("impl", ["torch", "cce"])
@pytest.mark.parametrize("bias", [True, False])
def test_on_cuda_against_the_float64_reference(impl, bias):
    """On the GPU: torch's chunked path in float64 to 1e-5; Cut Cross-Entropy (float32 in, TF32 tiles, gradient
    filtering) to 1e-3 for the loss and 1e-2 of the largest gradient entry."""
    from fairseq_outlayers.losses.linear_cross_entropy import cce_available, check_cce, torch_op_missing

    if impl == "torch" and torch_op_missing():  # the criterion refuses it in one line (test_option_checks)
        pytest.skip(f"the torch implementation {torch_op_missing()}")
    if impl == "cce" and not cce_available():
        pytest.skip("cut-cross-entropy is not installed")
    if impl == "cce" and check_cce(torch.device("cuda"), torch.float32):  # --fused-impl auto then takes torch
        pytest.skip(f"Cut Cross-Entropy refuses float32 here: {check_cce(torch.device('cuda'), torch.float32)}")
    x, w, b, t = _problem(n=300, v=5000, d=64, bias=bias)
    ref_loss, ref_nll = label_smoothed_nll_loss(F.log_softmax(F.linear(x, w, b), -1), t, 0.1, ignore_index=PAD)
    tensors = (x, w, b)
    ref_grads = _grads(ref_loss, tensors)
    dtype, rtol = (torch.float64, 1e-5) if impl == "torch" else (torch.float32, 1e-3)
    dev = [None if p is None else p.detach().to("cuda", dtype).requires_grad_() for p in tensors]
    loss, nll = linear_cross_entropy(dev[0], dev[1], dev[2], t.cuda(), 0.1, ignore_index=PAD, impl=impl)
    assert abs(float(loss) - float(ref_loss.detach())) <= rtol * abs(float(ref_loss.detach()))
    assert abs(float(nll) - float(ref_nll)) <= rtol * abs(float(ref_nll))
    for got, want in zip(_grads(loss, dev), ref_grads):
        err = float((got.double().cpu() - want).abs().max())
        assert err <= (1e-5 if impl == "torch" else 1e-2) * float(want.abs().max()), err


# -- the benchmark scripts (plumbing only: nothing is timed here) -----------------------------------------------------
def test_benchmark_script_writes_its_table(tmp_path):
    from harness import load_script

    bench = load_script("bench_fused_loss.py")
    out = tmp_path / "fused.md"
    bench.main(["--device", "cpu", "--vocab", "300", "--tokens", "64", "--dim", "16", "--layers", "softmax", "joint",
                "--model-arch", "outlayers_transformer_tiny", "--warmup", "0", "--repeats", "1", "--output", str(out)])
    text = out.read_text()
    assert "python scripts/bench_fused_loss.py --device cpu --vocab 300" in text.split("Command: `")[1]
    for part in ("softmax", "joint", "model"):
        assert f"| {part} | fp32 | plain |" in text and f"| {part} | fp32 | torch |" in text
    with pytest.raises(SystemExit):  # never overwrites a result without --force
        bench.main(["--device", "cpu", "--vocab", "300", "--output", str(out)])


def test_precision_script_refuses_what_fairseq_cannot_run_on_the_cpu(tmp_path, capsys):
    from harness import load_script

    bench = load_script("bench_precision.py")
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--synthetic", "--precisions", "fp32", "fp16", "--output",
                    str(tmp_path / "p.md")])
    assert "fairseq trains --fp16 and --amp on CUDA only" in capsys.readouterr().err


def test_autocast_is_switched_off_inside():
    """Under --amp (autocast) the matrix products of the loss would run in half precision; they do not."""
    x, w, b, t = _problem()
    ref, _ = label_smoothed_nll_loss(F.log_softmax(F.linear(x, w, b), -1), t, 0.1, ignore_index=PAD)
    x32, w32, b32 = (p.detach().float().requires_grad_() for p in (x, w, b))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = linear_cross_entropy(x32, w32, b32, t, 0.1, ignore_index=PAD, impl="torch", block_elements=64)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=0)
    gx, = torch.autograd.grad(loss, [x32])
    torch.testing.assert_close(gx.double(), torch.autograd.grad(ref, [x])[0], rtol=1e-4, atol=1e-5)  # bf16: 1e-2


# -- the check that guards Cut Cross-Entropy (run here on the CPU with stand-ins for its kernel) ----------------------
def test_cut_cross_entropy_is_used_only_after_it_gives_the_right_loss(monkeypatch):
    from fairseq_outlayers.losses import linear_cross_entropy as lce

    def exact(x, w, b, t):
        return torch.logsumexp(x @ w.t() + b, dim=1) - (x * w[t]).sum(1) - b[t]

    def off_by_five_percent(x, w, b, t):
        return 1.05 * exact(x, w, b, t)

    def broken(x, w, b, t):
        raise RuntimeError("triton: unsupported instruction\nmore lines")

    def nan_gradient(x, w, b, t):
        return exact(x, w, b, t) + 0 * torch.sqrt(-x.sum())

    monkeypatch.setattr(lce, "_CCE_CHECKS", {})
    cpu = torch.device("cpu")
    assert lce.check_cce(cpu, torch.float32, exact) is None
    monkeypatch.setattr(lce, "_CCE_CHECKS", {})
    assert "differs from the float64 loss" in lce.check_cce(cpu, torch.float32, off_by_five_percent)
    monkeypatch.setattr(lce, "_CCE_CHECKS", {})
    assert lce.check_cce(cpu, torch.float32, broken) == "RuntimeError: triton: unsupported instruction"
    monkeypatch.setattr(lce, "_CCE_CHECKS", {})
    assert lce.check_cce(cpu, torch.float32, nan_gradient) == "its gradient is not finite"
    with torch.no_grad():  # the check needs a gradient even when called from validation
        monkeypatch.setattr(lce, "_CCE_CHECKS", {})
        assert lce.check_cce(cpu, torch.float32, exact) is None
    # auto picks the kernel only on CUDA, only when installed and only when it passed its check
    monkeypatch.setattr(lce, "cce_available", lambda: True)
    cuda = torch.device("cuda")
    monkeypatch.setattr(lce, "_CCE_CHECKS", {(str(cuda), torch.bfloat16): None, (str(cuda), torch.float32): "x"})
    assert lce.resolve_impl("auto", cuda, torch.bfloat16) == "cce"
    assert lce.resolve_impl("auto", cuda, torch.float32) == "torch"
    assert lce.resolve_impl("auto", cpu, torch.bfloat16) == "torch"
    assert lce.resolve_impl("cce", cuda, torch.float32) == "cce"  # asked for by name: no fallback
    monkeypatch.setitem(lce.AUTO, "cuda", "cce")  # figures that name cce keep its check and its fallback
    assert lce.resolve_impl("auto", cuda, torch.float32) == "torch"
    assert lce.resolve_impl("auto", cuda, torch.bfloat16) == "cce"


# -- auto follows the committed figures ------------------------------------------------------------------------------
def peer_tables(page):
    """{section heading: [(implementation, --fused-impl, ms, exact)]} of a fused_loss_peers_*.md page."""
    tables, heading = {}, None
    for line in page.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:] if line.startswith("## N = ") else None
            if heading:
                tables[heading] = []
        elif heading and line.startswith("| ") and not line.startswith("| implementation"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[2].replace(",", "").isdigit():  # not OOM / failed
                tables[heading].append((cells[0], cells[1].strip("`"), float(cells[2].replace(",", "")),
                                        cells[-1] == "yes"))
    return tables


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_auto_picks_what_the_committed_page_says_is_fastest(device):
    """In every table of the device's committed page, the fastest exact row that the criterion can run is the
    implementation that ``auto`` resolves to on that device."""
    from harness import REPO

    from fairseq_outlayers.losses import linear_cross_entropy as lce

    page = __import__("pathlib").Path(REPO, "docs", "benchmarks", f"fused_loss_peers_{device}.md")
    if not page.exists():
        assert device not in lce.AUTO, f"AUTO names {device}, but {page.name} is not committed"
        pytest.skip(f"{page.name} is not committed (no run on this device yet)")
    tables = peer_tables(page)
    assert tables and all(tables.values()), f"{page.name} has no tables"
    if not any(r[1] and r[3] for rows in tables.values() for r in rows):  # H200 of 2026-12-04: torch 2.11, cce fp32
        assert device not in lce.AUTO, f"AUTO names {device}, but {page.name} has no exact --fused-impl row"
        pytest.skip(f"{page.name} has no exact --fused-impl row to choose from")
    assert device in lce.AUTO, f"{page.name} is committed: set linear_cross_entropy.AUTO[{device!r}] from it"
    for heading, rows in tables.items():
        package = [r for r in rows if r[1] and r[3]]
        assert package, f"{heading}: no exact --fused-impl row"
        fastest = min(package, key=lambda r: r[2])
        assert fastest[1] == lce.AUTO[device], f"{heading}: fastest exact is {fastest[0]}, auto is {lce.AUTO[device]}"
        assert lce.resolve_impl("auto", torch.device(device), torch.float32) == fastest[1]


def test_peer_benchmark_writes_its_page(tmp_path):
    """Plumbing only, at a tiny size: every peer's row, the header the docs check reads, the sizes not run."""
    from harness import load_script

    from fairseq_outlayers.lab.docs import benchmark_facts

    bench = load_script("bench_fused_loss.py")
    out = tmp_path / "fused_loss_peers_cpu.md"
    bench.main(["--peers", "--device", "cpu", "--sizes", "64x8x300", "--rounds", "1", "--blocks", "4800",
                "--not-run", "8192x512x256000", "--output", str(out)])
    facts = benchmark_facts(str(out))
    assert "python scripts/bench_fused_loss.py --peers --device cpu" in facts["command"] and facts["device"]
    tables = peer_tables(out)
    assert list(tables) == ["N = 64, d = 8, V = 300, eps = 0", "N = 64, d = 8, V = 300, eps = 0.1"]
    names = [r[0] for r in tables["N = 64, d = 8, V = 300, eps = 0"]]
    assert names == ["plain", "torch reference", "torch chunked, auto", "torch chunked, aspect_ratio",
                     "`--fused-impl torch`, 4,800 logits"]
    assert all(r[3] for rows in tables.values() for r in rows)  # float32 at this size: every row within tolerance
    assert "| 8,192 | 512 | 256,000 |" in out.read_text().split("## Not run here")[1]


def test_on_a_torch_without_the_op_the_peer_page_leaves_its_rows_out_and_says_why(tmp_path, monkeypatch):
    """torch < 2.13 (the GPU image's torch 2.11 on 2026-12-04): no F.linear_cross_entropy rows, no `--fused-impl
    torch` row; the page says so in one line and the other rows run."""
    from harness import load_script

    monkeypatch.delattr(torch.nn, "LinearCrossEntropyOptions")
    bench = load_script("bench_fused_loss.py")
    out = tmp_path / "fused_loss_peers_cpu.md"
    bench.main(["--peers", "--device", "cpu", "--sizes", "64x8x300", "--rounds", "1", "--blocks", "4800",
                "--smoothing", "0", "--output", str(out)])
    text = out.read_text()
    assert "**Left out:** the torch rows and `--fused-impl torch`: the op needs torch >= 2.13" in text
    assert [r[0] for r in peer_tables(out)["N = 64, d = 8, V = 300, eps = 0"]] == ["plain"]


def test_on_a_torch_without_the_op_the_fused_page_runs_without_its_torch_rows(tmp_path, monkeypatch):
    """The `fused-loss` GPU step failed on torch 2.11 (2026-12-04, second call): its default rows asked for torch's
    op. Now they leave it out and say why; asking for it by name is refused before anything runs."""
    from harness import load_script

    monkeypatch.delattr(torch.nn, "LinearCrossEntropyOptions")
    bench = load_script("bench_fused_loss.py")
    out = tmp_path / "fused.md"
    small = ["--device", "cpu", "--vocab", "300", "--tokens", "64", "--dim", "16", "--layers", "softmax",
             "--model-arch", "none", "--warmup", "0", "--repeats", "1", "--output", str(out)]
    bench.main(small)
    text = out.read_text()
    assert "**Left out:** the torch rows: the op needs torch >= 2.13" in text
    assert "| softmax | fp32 | plain |" in text and "| softmax | fp32 | torch |" not in text
    with pytest.raises(SystemExit):
        bench.main(small + ["--impls", "plain", "torch", "--force"])


def test_a_peer_that_fails_gets_a_row_and_the_others_run(monkeypatch):
    """On a GPU for the first time, Liger or Cut Cross-Entropy may fail (another Triton): the table says so."""
    from fairseq_outlayers.lab.bench import fused_peers

    every = fused_peers.contestants

    def with_a_broken_peer(*args, **kwargs):
        def broken(x, w, b, t, eps):
            raise RuntimeError("triton: unsupported | instruction\nmore lines")
        return every(*args, **kwargs) + [fused_peers.Contestant("broken peer", "", None, broken)]

    monkeypatch.setattr(fused_peers, "contestants", with_a_broken_peer)
    rows = fused_peers.measure(32, 8, 100, 0.1, "cpu", 1, [800], log=lambda m: None)
    table = fused_peers.table(rows, 32)
    assert "| broken peer |  | failed: RuntimeError: triton: unsupported / instruction | |" in table
    assert all(r["seconds"] is not None for r in rows if r["name"] != "broken peer")
