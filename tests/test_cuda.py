"""The package on a CUDA GPU: every output layer and criterion trains and generates there, log C_m and its
gradient match the float64 CPU reference, continuous decoding (exact, top-K, faiss) and the sampled softmax run
on the device, and every method takes a few mixed-precision updates.

Every test here is skipped without CUDA (``torch.cuda.is_available()``), at no cost to the CPU suite: no
fixture is built for a skipped test. ``OUTLAYERS_CUDA_TEST_DEVICE=cpu`` runs the same tests on the CPU, to check
this file's plumbing on a machine without a GPU (the half-precision tests stay skipped: fairseq implements them on
CUDA only). See docs/gpu.md.
"""
import math
import os

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary

from fairseq_outlayers.methods.continuous.bessel import bessel_iv_ratio, log_cm, log_cm_float64
from harness import TINY_LSTM, TINY_TRANSFORMER, generate, logged_losses, train

DEVICE = os.environ.get("OUTLAYERS_CUDA_TEST_DEVICE", "cuda")
ON_GPU = DEVICE == "cuda"
pytestmark = pytest.mark.skipif(ON_GPU and not torch.cuda.is_available(), reason="no CUDA device")
needs_cuda = pytest.mark.skipif(not (ON_GPU and torch.cuda.is_available()), reason="fp16 and --amp need CUDA")

N_TEST = 24  # sentences in the harness's test split
VEC, PAIRING = "<vectors>", "<pairing>"  # replaced by the fixtures' files

#: method -> (data, fairseq options): every output layer, every criterion, the shared-private embeddings
METHODS = {
    "softmax-ce": ("sep", ["--output-layer", "softmax", "--criterion", "cross_entropy"]),
    "softmax-ls": ("sep", ["--output-layer", "softmax", "--output-bias", "--criterion",
                           "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]),
    "tied": ("sep", ["--output-layer", "tied", "--criterion", "cross_entropy"]),
    "tied-all": ("joined", ["--output-layer", "tied-all", "--criterion", "cross_entropy"]),
    "joint": ("sep", ["--output-layer", "joint", "--joint-dim", "16", "--criterion", "cross_entropy"]),
    "joint-sampled": ("sep", ["--output-layer", "joint", "--joint-dim", "16", "--criterion", "sampled_softmax",
                              "--sample-ratio", "0.5"]),
    "softmax-sampled": ("sep", ["--output-layer", "softmax", "--criterion", "sampled_softmax",
                                "--sample-ratio", "0.5"]),
    "fixed": ("sep", ["--output-layer", "fixed", "--criterion", "cross_entropy"]),
    "fixed-sampled": ("sep", ["--output-layer", "fixed", "--criterion", "sampled_softmax", "--sample-ratio", "0.5"]),
    "softmax-fused": ("sep", ["--output-layer", "softmax", "--output-bias", "--criterion", "fused_cross_entropy",
                              "--label-smoothing", "0.1"]),
    "joint-fused": ("sep", ["--output-layer", "joint", "--joint-dim", "16", "--criterion", "fused_cross_entropy",
                            "--label-smoothing", "0.1"]),
    "shared-private": ("sep", ["--embeddings", "shared-private", "--output-layer", "tied", "--pairing", PAIRING,
                               "--criterion", "cross_entropy"]),
    "continuous-vmf_nll": ("sep", ["--output-layer", "continuous", "--target-vectors", VEC, "--criterion", "vmf_nll"]),
    "continuous-cosine": ("sep", ["--output-layer", "continuous", "--target-vectors", VEC, "--criterion", "cosine"]),
    "continuous-l2": ("sep", ["--output-layer", "continuous", "--target-vectors", VEC, "--criterion", "l2"]),
    "continuous-max_margin": ("sep", ["--output-layer", "continuous", "--target-vectors", VEC,
                                      "--criterion", "max_margin"]),
}


@pytest.fixture(scope="module")
def target_vectors(tiny_bin, tmp_path_factory):
    """Random m = 16 vectors for every target word of the tiny corpus (word2vec text format)."""
    d = Dictionary.load(os.path.join(tiny_bin, "dict.en.txt"))
    words = [w for w in d.symbols[d.nspecial:] if not w.startswith("madeupword")]
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("vec") / "en.vec"
    path.write_text(f"{len(words)} 16\n" + "".join(w + " " + " ".join(f"{x:.6f}" for x in rng.standard_normal(16))
                                                   + "\n" for w in words))
    return str(path)


@pytest.fixture(scope="module")
def pairing(tiny_raw, tiny_bin, tmp_path_factory):
    from harness import pairing_file

    return pairing_file(tiny_raw, tiny_bin, str(tmp_path_factory.mktemp("pairing") / "pairs.txt"))


@pytest.fixture
def method_args(request, tiny_bin, tiny_bin_joined):
    """(data directory, options) of a METHODS entry, with the vector / pairing files filled in on demand."""
    def resolve(name):
        data, args = METHODS[name]
        if VEC in args:
            args = [request.getfixturevalue("target_vectors") if a == VEC else a for a in args]
        if PAIRING in args:
            args = [request.getfixturevalue("pairing") if a == PAIRING else a for a in args]
        return (tiny_bin_joined if data == "joined" else tiny_bin), args
    return resolve


def _ran_on_device(proc):
    # fairseq-train prints its CUDA environment table only when it trains on GPUs
    assert ("CUDA enviroments for all" in proc.stdout + proc.stderr) == ON_GPU, (proc.stdout + proc.stderr)[-3000:]


@pytest.mark.parametrize("arch", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_trains_and_generates(name, arch, method_args, tmp_path):
    data, args = method_args(name)
    save = str(tmp_path / "ckpt")
    proc = train(data, save, arch, args, max_update=4, device=DEVICE)
    _ran_on_device(proc)
    losses = logged_losses(proc.stdout + proc.stderr)
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses), losses
    _, hyps = generate(data, os.path.join(save, "checkpoint_last.pt"), ["--max-len-a", "0", "--max-len-b", "10"],
                       device=DEVICE)
    assert len(hyps) == N_TEST


@needs_cuda
# fairseq 0.12's command line runs --bf16 / --memory-efficient-bf16 on TPUs only (it sets --tpu); the package takes
# the implied --tpu back (fairseq_outlayers/core/fairseq_compat.py, tests/test_bf16.py)
@pytest.mark.parametrize("precision", ["--fp16", "--memory-efficient-fp16", "--amp", "--bf16",
                                       "--memory-efficient-bf16"])
@pytest.mark.parametrize("name", sorted(METHODS))
def test_mixed_precision_smoke(name, precision, method_args, tmp_path):
    """A few updates in each precision: the run finishes, the logged losses are finite, decoding works."""
    data, args = method_args(name)
    save = str(tmp_path / "ckpt")
    proc = train(data, save, TINY_TRANSFORMER, args + [precision], max_update=6, device=DEVICE)
    if "bf16" in precision:
        _ran_on_device(proc)  # not on a TPU
    losses = logged_losses(proc.stdout + proc.stderr)
    assert losses and all(math.isfinite(x) for x in losses), losses
    _, hyps = generate(data, os.path.join(save, "checkpoint_last.pt"),
                       ["--max-len-a", "0", "--max-len-b", "10"]
                       + ([] if "bf16" in precision else [precision.replace("memory-efficient-", "")]),
                       device=DEVICE)
    assert len(hyps) == N_TEST


@pytest.mark.parametrize("m", [16, 300, 1024])
def test_log_cm_and_gradient_on_device_match_the_float64_cpu_reference(m):
    kappas = [1e-3, 0.1, 1.0, 7.0, 50.0, 150.0, 299.0, 301.0, 1000.0, 5000.0, 6e4]
    for dtype, rtol in ((torch.float32, 2e-5), (torch.float64, 1e-11)):
        kappa = torch.tensor(kappas, dtype=dtype, device=DEVICE, requires_grad=True)
        value = log_cm(kappa, m)
        value.sum().backward()
        assert value.device.type == kappa.device.type and kappa.grad.device.type == kappa.device.type
        k64 = kappa.detach().cpu().double()  # the same (rounded) κ, on the CPU in float64
        ref_value = log_cm_float64(k64, m)
        ref_grad = -bessel_iv_ratio(m / 2 - 1, k64)  # d/dκ log C_m(κ) = -I_(m/2)(κ) / I_(m/2-1)(κ)
        got_value, got_grad = value.detach().cpu().double(), kappa.grad.cpu().double()
        assert torch.allclose(got_value, ref_value, rtol=rtol, atol=0), (dtype, got_value, ref_value)
        assert torch.allclose(got_grad, ref_grad, rtol=rtol, atol=0), (dtype, got_grad, ref_grad)


def test_compiled_vmf_losses_on_device_match_eager_log_cm():
    """--vmf-compile on the device (torch.compile with Triton on a GPU): the released and reg1 losses and their
    gradients equal the eager ones to float32 rounding, for two batch sizes (one dynamic graph), zero row included,
    with no fallback. A "log_cm" test, so that the first correctness step of scripts/gpu_run.sh runs it."""
    import torch.nn.functional as F

    from fairseq_outlayers.methods.continuous import vmf_losses

    for state in vmf_losses.COMPILED_ROWS.values():
        state.update(kernel=None, failed=False)
    for n in (300, 8192):
        gen = torch.Generator().manual_seed(n)
        e = torch.randn(n, 300, generator=gen) * torch.logspace(-2, 2, n).unsqueeze(-1)
        e[0] = 0.0
        t = F.normalize(torch.randn(n, 300, generator=gen), dim=-1)
        e, t = e.to(DEVICE), t.to(DEVICE)
        for loss in (lambda x, c: vmf_losses.vmf_released_loss(x, t, 0.2, compiled=c),
                     lambda x, c: vmf_losses.vmf_nll_loss(x, t, 0.2, 1.0, compiled=c)):
            out = []
            for compiled in (True, False):
                x = e.clone().requires_grad_(True)
                value = loss(x, compiled)
                value.sum().backward()
                out.append((value.detach().cpu(), x.grad.cpu()))
            (v_c, g_c), (v_e, g_e) = out
            assert torch.isfinite(v_c).all() and torch.isfinite(g_c).all()
            torch.testing.assert_close(v_c, v_e, rtol=2e-6, atol=2e-6 * 300)
            torch.testing.assert_close(g_c, g_e, rtol=2e-6, atol=2e-6)
    assert all(state["kernel"] is not None and not state["failed"] for state in vmf_losses.COMPILED_ROWS.values())


def test_sampled_vocabulary_on_device():
    """Negatives drawn with a device generator: every target and pad kept, the remap exact, seeded draws equal."""
    from fairseq_outlayers.losses.negative_sampling import sample_vocabulary

    targets = torch.tensor([[5, 17, 17, 1], [90, 2, 1, 1]], device=DEVICE)
    draws = []
    for _ in range(2):
        gen = torch.Generator(device=DEVICE).manual_seed(3)
        ids, remapped = sample_vocabulary(targets, 100, 0.25, pad=1, generator=gen)
        assert ids.device.type == remapped.device.type == targets.device.type
        assert ids.numel() == 25 and set(targets.flatten().tolist()) <= set(ids.tolist())
        assert torch.equal(ids[remapped], targets)
        draws.append(ids)
    assert torch.equal(draws[0], draws[1])


@pytest.fixture(scope="module")
def continuous_checkpoint(tiny_bin, target_vectors, tmp_path_factory):
    save = str(tmp_path_factory.mktemp("cont"))
    _ran_on_device(train(tiny_bin, save, TINY_TRANSFORMER, ["--output-layer", "continuous", "--target-vectors",
                                                           target_vectors, "--criterion", "vmf_nll", "--lr", "0.005"],
                         max_update=30, device=DEVICE))
    return os.path.join(save, "checkpoint_last.pt")


def test_continuous_decoding_exact_topk_and_faiss_on_device(tiny_bin, continuous_checkpoint):
    """Greedy decoding on the device: top-K (torch) and faiss give exactly the dense search's output, and the dense
    search on the device agrees with the CPU's (ties aside)."""
    bounded = ["--beam", "1", "--max-len-a", "0", "--max-len-b", "10"]
    _, exact = generate(tiny_bin, continuous_checkpoint, bounded + ["--model-overrides",
                                                                    "{'continuous_search': 'exact'}"], device=DEVICE)
    _, topk = generate(tiny_bin, continuous_checkpoint, bounded + ["--model-overrides",
                                                                   "{'continuous_topk': 5}"], device=DEVICE)
    _, cpu = generate(tiny_bin, continuous_checkpoint, bounded, device="cpu")
    assert len(exact) == N_TEST and topk == exact
    assert sum(exact[i] == cpu[i] for i in exact) >= 0.9 * N_TEST
    _, beam = generate(tiny_bin, continuous_checkpoint, ["--beam", "4", "--model-overrides", "{'continuous_topk': 5}"],
                       device=DEVICE)
    assert len(beam) == N_TEST
    pytest.importorskip("faiss")
    _, fast = generate(tiny_bin, continuous_checkpoint, bounded + ["--model-overrides",
                                                                   "{'continuous_search': 'faiss'}"], device=DEVICE)
    assert fast == exact
