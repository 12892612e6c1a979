"""The vMF loss's defaults and guards: the released form by default, reg1+reg2 with λ1 >= λ2 refused before any
data is read, the κ alarms (implied cosine, bounds, warnings), a NaN prediction stopping training, and the export
of a trained model's word matrix as target vectors."""
import logging
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from harness import TINY_TRANSFORMER, train
from test_continuous_output import tiny_vectors  # noqa: F401  (fixture)

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.methods.continuous.bessel import bessel_iv_ratio
from fairseq_outlayers.methods.continuous.vmf_losses import implied_cosine, kappa_alarm_bounds


def test_default_variant_is_released():
    from fairseq_outlayers.methods.continuous.criterions import VMFNLLConfig

    assert VMFNLLConfig().vmf_variant == "released" and VMFNLLConfig().vmf_released_lambda == 0.2


@pytest.mark.parametrize("m", [50, 300, 1000])
def test_implied_cosine_is_the_stationary_point_of_each_loss(m):
    """At κ, the loss's κ-derivative (by autograd, float64) vanishes exactly when cos = ĉ(κ)."""
    from fairseq_outlayers.methods.continuous.vmf_losses import vmf_nll_loss, vmf_released_loss

    target = torch.zeros(1, m, dtype=torch.float64)
    target[0, 0] = 1.0
    for kappa in (0.5, 7.0, 60.0, 400.0):
        for variant, kw in (("plain", {}), ("reg1", dict(lambda1=0.2)), ("reg2", dict(lambda2=0.1)),
                            ("reg1+reg2", dict(lambda1=0.02, lambda2=0.1)), ("released", dict(released_lambda=0.2))):
            c = float(implied_cosine(torch.tensor([kappa]), m, variant, **kw)[0])
            if not -1 < c < 1:
                continue
            direction = torch.zeros(1, m, dtype=torch.float64)
            direction[0, 0], direction[0, 1] = c, math.sqrt(1 - c * c)
            k = torch.tensor(kappa, dtype=torch.float64, requires_grad=True)
            e_hat = k * direction
            if variant == "released":
                loss = vmf_released_loss(e_hat, target, kw["released_lambda"])
            else:
                loss = vmf_nll_loss(e_hat, target, kw.get("lambda1", 0.0), kw.get("lambda2", 1.0))
            loss.sum().backward()
            assert abs(k.grad.item()) < 1e-9, (variant, kappa, c, k.grad.item())


def test_kappa_alarm_bounds():
    m = 300
    eps = m ** -0.5
    # reg1/plain: A_m(κ_low) = m^-1/2 (κ ≈ √m for κ ≪ m), independent of λ1
    for variant, kw in (("plain", {}), ("reg1", dict(lambda1=0.2))):
        low, high = kappa_alarm_bounds(m, variant, **kw)
        assert float(bessel_iv_ratio(m / 2 - 1, torch.tensor([low], dtype=torch.float64))[0]) == pytest.approx(eps, rel=1e-9)
        assert 16 < low < 19
    # reg1: ĉ(κ_high) = A + 0.2 = 1 - ε; plain: A = 1 - ε ≈ 1 - (m-1)/(2κ), so κ_high ≈ (m-1)√m/2
    _, high = kappa_alarm_bounds(m, "reg1", lambda1=0.2)
    assert float(bessel_iv_ratio(m / 2 - 1, torch.tensor([high], dtype=torch.float64))[0]) == pytest.approx(0.8 - eps, rel=1e-9)
    _, high = kappa_alarm_bounds(m, "plain")
    assert high == pytest.approx((m - 1) * math.sqrt(m) / 2, rel=0.05)
    # released: λ + (1+κ)A = 1 - ε at κ_high ≈ 14.4 (m = 300): κ stays near (m·cos)^1/2
    low, high = kappa_alarm_bounds(m, "released", released_lambda=0.2)
    assert (1 + high) * float(bessel_iv_ratio(m / 2 - 1, torch.tensor([high], dtype=torch.float64))[0]) == pytest.approx(0.8 - eps)
    assert 3 < low < 5 and 13 < high < 16


def _reduce(criterion_cls, logs):
    from fairseq.logging import metrics

    with metrics.aggregate() as agg:
        criterion_cls.reduce_metrics(logs)
    return agg.get_smoothed_values()


def test_kappa_alarms_warn_once_on_forced_cases_and_stay_silent_otherwise(caplog):
    from fairseq_outlayers.methods.continuous import criterions as cl

    crit = object.__new__(cl.VMFNLLCriterion)  # only the alarm state is needed
    crit.variant, crit.lambda1, crit.lambda2, crit.released_lambda, crit._bounds = "reg1", 0.2, 1.0, 0.2, {}
    crit._warming = False
    crit._dim = 300
    low, high = crit.kappa_bounds(300)
    cl._WARNED.clear()
    keep = torch.ones(2000, dtype=torch.bool)

    def logs(kappa):
        lo, hi = crit.kappa_alarm_counts(kappa, keep)
        return [{"loss": 0.0, "ntokens": 2000, "sample_size": 2000, "cos_sum": 0.0, "norm_sum": 0.0,
                 "kappa_low": lo, "kappa_high": hi, "kappa_n": keep.sum()}]

    healthy = torch.full((2000,), 0.5 * (low + high))
    with caplog.at_level(logging.WARNING):
        values = _reduce(cl.VMFNLLCriterion, logs(healthy))
    assert values["kappa_low"] == 0 and values["kappa_high"] == 0 and "κ alarm" not in caplog.text
    collapsed = torch.full((2000,), 0.5 * low)
    collapsed[:200] = 2 * low
    with caplog.at_level(logging.WARNING):
        values = _reduce(cl.VMFNLLCriterion, logs(collapsed))
        _reduce(cl.VMFNLLCriterion, logs(collapsed))
    assert values["kappa_low"] == pytest.approx(90.0)
    assert caplog.text.count("κ alarm") == 1 and "90% of the tokens have |ê| <" in caplog.text
    assert "--vmf-variant released" in caplog.text
    with caplog.at_level(logging.WARNING):
        _reduce(cl.VMFNLLCriterion, logs(torch.full((2000,), 2 * high)))
    assert "100% of the tokens have |ê| >" in caplog.text and "runs away" in caplog.text
    cl._WARNED.clear()


def test_reg1_reg2_with_lambda1_ge_lambda2_cannot_start(tiny_bin, tiny_vectors, tmp_path):
    """Refused in one line when the options are checked: before fairseq loads any data."""
    proc = train(tiny_bin, str(tmp_path / "c"), TINY_TRANSFORMER,
                 ["--output-layer", "continuous", "--target-vectors", tiny_vectors, "--criterion", "vmf_nll",
                  "--vmf-variant", "reg1+reg2"], max_update=1, check=False, cli="outlayers-train")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--vmf-variant reg1+reg2 with --vmf-lambda1 0.2 >= --vmf-lambda2 0.1 cannot train" in proc.stderr
    assert "loaded" not in proc.stdout + proc.stderr  # no dataset was read
    from fairseq_outlayers.methods.continuous.criterions import check_vmf_options

    check_vmf_options("reg1+reg2", 0.02, 0.1, 0.2)  # the authors' λ1 trains
    with pytest.raises(OutlayersConfigError, match="cannot train"):
        check_vmf_options("reg1+reg2", 0.1, 0.1, 0.2)


def test_nan_prediction_stops_with_a_clear_message():
    from fairseq_outlayers.methods.continuous.criterions import CosineCriterion, VMFNLLCriterion
    from fairseq_outlayers.methods.continuous.continuous_output import ContinuousOutput

    class Task:
        target_dictionary = None

    table = F.normalize(torch.randn(10, 4), dim=-1)
    layer = ContinuousOutput(table, torch.ones(10, dtype=torch.bool), 3)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.decoder = torch.nn.Module()
            self.decoder.output_projection = layer

        def forward(self, **kw):
            return (torch.full((1, 2, 4), math.nan),)

        def get_targets(self, sample, net_output):
            return sample["target"]

    sample = {"net_input": {}, "target": torch.tensor([[3, 4]]), "ntokens": 2}
    for cls in (VMFNLLCriterion, CosineCriterion):
        crit = object.__new__(cls)
        torch.nn.Module.__init__(crit)
        crit.padding_idx, crit.sentence_avg = 1, False
        with pytest.raises(FloatingPointError, match="predicted a NaN or infinite vector"):
            crit.forward(Model(), sample)


def test_export_trained_output_matrix_round_trips_into_target_vectors(tiny_bin, tiny_vectors, tmp_path):
    from fairseq.data import Dictionary

    from fairseq_outlayers.tools.vectors import main
    from fairseq_outlayers.methods.continuous.target_vectors import load_target_table

    save = str(tmp_path / "softmax")
    train(tiny_bin, save, TINY_TRANSFORMER, ["--output-layer", "softmax"], max_update=2)
    ckpt = os.path.join(save, "checkpoint_last.pt")
    out = str(tmp_path / "exported.vec")
    assert main(["export", ckpt, out]) == 0
    assert main(["export", ckpt, out]) == 1  # never overwritten without --force
    assert main(["export", ckpt, out, "--force", "--matrix", "input"]) == 0
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["model"]
    weight = state["decoder.embed_tokens.weight"].float()
    dictionary = Dictionary.load(os.path.join(tiny_bin, "dict.en.txt"))
    lines = open(out, encoding="utf-8").read().splitlines()
    n, dim = map(int, lines[0].split())
    assert dim == weight.size(1) and n == len(lines) - 1 == len(dictionary) - 1 - sum(
        w.startswith("madeupword") for w in dictionary.symbols)
    table = load_target_table(dictionary, out, 0.5)
    word = dictionary.index(lines[5].split()[0])
    assert torch.allclose(table.table[word], F.normalize(weight[word], dim=0), atol=1e-5)
    # the exported vectors train a continuous model
    train(tiny_bin, str(tmp_path / "c"), TINY_TRANSFORMER,
          ["--output-layer", "continuous", "--target-vectors", out, "--criterion", "vmf_nll"], max_update=2)
    # a continuous model has no softmax-type output matrix: one line
    assert main(["export", os.path.join(str(tmp_path / "c"), "checkpoint_last.pt"), str(tmp_path / "x.vec")]) == 1
    assert np.isfinite(table.table.numpy()).all()
