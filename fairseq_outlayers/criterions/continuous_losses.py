"""Criterions for continuous outputs (Kumar & Tsvetkov 2019): ``vmf_nll``, ``cosine``, ``l2``, ``max_margin``.

They need ``--output-layer continuous``: the model returns ê (B, T, m) and the criterion compares it with the
frozen unit target vector e(w) of each reference word (the per-token maths is in ``modules/vmf.py``). Padding
positions are ignored. Besides the loss (natural units, per token, or per sentence with ``--sentence-avg``)
they report ``cos`` (mean cosine between ê and e(w)), ``norm`` (mean ‖ê‖ = κ) and, on validation, ``nn_acc``
(how often the nearest target vector of ê is the reference word, i.e. greedy decoding with the gold prefix).
Every logged quantity is a sum, so logging outputs can be summed across workers.
"""
import logging
from dataclasses import dataclass, field

import torch
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics
from omegaconf import II

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.modules.continuous_output import ContinuousOutput
from fairseq_outlayers.modules.vmf import (cosine_loss, cosine_similarity, l2_loss, max_margin_loss,
                                           vmf_nll_loss, vmf_released_loss)

logger = logging.getLogger(__name__)

VMF_VARIANTS = ChoiceEnum(["reg1+reg2", "reg1", "reg2", "plain", "released"])


@dataclass
class ContinuousLossConfig(FairseqDataclass):
    sentence_avg: bool = II("optimization.sentence_avg")


@dataclass
class VMFNLLConfig(ContinuousLossConfig):
    vmf_variant: VMF_VARIANTS = field(
        default="reg1",
        metadata={"help": "reg1: -log C_m(κ) - ê.e + λ1 κ; reg2: -log C_m(κ) - λ2 ê.e (eq. 3); reg1+reg2: "
                  "-log C_m(κ) - λ2 ê.e + λ1 κ (with λ1 >= λ2 it drives κ to 0: lower --vmf-lambda1, e.g. "
                  "0.02); "
                  "plain: NLLvMF; released: the authors' code, -log C_m(κ) + log(1+κ)(λ - cos)"})
    vmf_lambda1: float = field(default=0.2, metadata={"help": "λ1 of reg1 (paper: 0.2), >= 0"})
    vmf_lambda2: float = field(default=0.1, metadata={"help": "λ2 of reg2 (paper: 0.1), in (0, 1]"})
    vmf_released_lambda: float = field(default=0.2, metadata={"help": "λ of the released variant (0.2), in [0, 1]"})
    vmf_log_cm: ChoiceEnum(["exact", "approx"]) = field(
        default="exact", metadata={"help": "log C_m(κ): exact (Bessel, float64) or the paper's appendix "
                                   "approximation"})


@dataclass
class MaxMarginConfig(ContinuousLossConfig):
    margin: float = field(default=0.5, metadata={"help": "margin γ of the max-margin loss (paper: 0.5), > 0"})


def continuous_output_layer(model) -> ContinuousOutput:
    layer = getattr(getattr(model, "decoder", None), "output_projection", None)
    if not isinstance(layer, ContinuousOutput):
        raise OutlayersConfigError("the continuous criterions (vmf_nll, cosine, l2, max_margin) need "
                                   "--output-layer continuous --target-vectors FILE")
    return layer


class ContinuousLossCriterion(FairseqCriterion):
    """Shared forward pass and metrics; subclasses define ``token_losses``."""

    def __init__(self, task, sentence_avg):
        super().__init__(task)
        self.sentence_avg = sentence_avg

    def token_losses(self, e_hat, target_ids, target_vectors, layer):  # (N, m), (N,), (N, m) -> (N,)
        raise NotImplementedError

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        layer = continuous_output_layer(model)
        target = model.get_targets(sample, net_output).reshape(-1)
        e_hat = net_output[0].reshape(target.numel(), -1).float()  # losses in float32 even under fp16/bf16
        vectors = layer.target_table.index_select(0, target).float()
        keep = target.ne(self.padding_idx)
        losses = torch.where(keep, self.token_losses(e_hat, target, vectors, layer), 0.0)
        loss = losses.sum() if reduce else losses
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        with torch.no_grad():
            cos = torch.where(keep, cosine_similarity(e_hat, vectors), 0.0).sum()
            norm = torch.where(keep, torch.linalg.vector_norm(e_hat, dim=-1), 0.0).sum()
        logging_output = {
            "loss": losses.sum().data, "ntokens": sample["ntokens"], "nsentences": sample["target"].size(0),
            "sample_size": sample_size, "cos_sum": cos.data, "norm_sum": norm.data,
        }
        if not model.training:  # nearest-neighbour accuracy costs O(V) per token: validation only
            _, ids = layer.predict(e_hat.detach())
            logging_output["nn_correct"] = (ids[:, 0].eq(target) & keep).sum().data
            logging_output["nn_total"] = keep.sum().data
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return utils.item(sum(log.get(key, 0) for log in logging_outputs))

        loss_sum, ntokens, sample_size = total("loss"), total("ntokens"), total("sample_size")
        metrics.log_scalar("loss", loss_sum / max(sample_size, 1), sample_size, round=4)
        metrics.log_scalar("cos", total("cos_sum") / max(ntokens, 1), ntokens, round=4)
        metrics.log_scalar("norm", total("norm_sum") / max(ntokens, 1), ntokens, round=3)
        nn_total = total("nn_total")
        if nn_total > 0:
            metrics.log_scalar("nn_total", nn_total)
            metrics.log_scalar("nn_correct", total("nn_correct"))
            metrics.log_derived(
                "nn_acc",
                lambda meters: round(100.0 * meters["nn_correct"].sum / meters["nn_total"].sum, 3)
                if meters["nn_total"].sum > 0 else float("nan"),
            )

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


@register_criterion("vmf_nll", dataclass=VMFNLLConfig)
class VMFNLLCriterion(ContinuousLossCriterion):
    """von Mises-Fisher negative log-likelihood (Kumar & Tsvetkov 2019, section 3, eq. 3 and reg1), or the
    variant of the authors' released code. log C_m(κ) is exact (float64 Bessel) unless --vmf-log-cm approx."""

    def __init__(self, task, sentence_avg, vmf_variant="reg1", vmf_lambda1=0.2, vmf_lambda2=0.1,
                 vmf_released_lambda=0.2, vmf_log_cm="exact"):
        super().__init__(task, sentence_avg)
        variant = str(vmf_variant)
        if not vmf_lambda1 >= 0:
            raise OutlayersConfigError(f"--vmf-lambda1 must be >= 0, got {vmf_lambda1}")
        if not 0 < vmf_lambda2 <= 1:
            raise OutlayersConfigError(f"--vmf-lambda2 must be in (0, 1], got {vmf_lambda2}")
        if not 0 <= vmf_released_lambda <= 1:
            raise OutlayersConfigError(f"--vmf-released-lambda must be in [0, 1], got {vmf_released_lambda}")
        self.variant = variant
        self.released = variant == "released"
        self.released_lambda = vmf_released_lambda
        self.lambda1 = vmf_lambda1 if variant in ("reg1", "reg1+reg2") else 0.0
        self.lambda2 = vmf_lambda2 if variant in ("reg2", "reg1+reg2") else 1.0
        self.approximate = str(vmf_log_cm) == "approx"
        if variant == "reg1+reg2" and vmf_lambda1 >= vmf_lambda2:
            logger.warning(f"--vmf-variant reg1+reg2 with --vmf-lambda1 {vmf_lambda1} >= --vmf-lambda2 "
                           f"{vmf_lambda2}: the loss grows with κ = |ê| for every direction, so |ê| collapses "
                           "towards 0; use a smaller --vmf-lambda1 (e.g. 0.02) or --vmf-variant reg1/released")

    def token_losses(self, e_hat, target_ids, target_vectors, layer):
        if self.released:
            return vmf_released_loss(e_hat, target_vectors, self.released_lambda, self.approximate)
        return vmf_nll_loss(e_hat, target_vectors, self.lambda1, self.lambda2, self.approximate)


@register_criterion("cosine", dataclass=ContinuousLossConfig)
class CosineCriterion(ContinuousLossCriterion):
    """Cosine loss 1 - cos(ê, e(w)) (Kumar & Tsvetkov 2019, section 4.2)."""

    def token_losses(self, e_hat, target_ids, target_vectors, layer):
        return cosine_loss(e_hat, target_vectors)


@register_criterion("l2", dataclass=ContinuousLossConfig)
class L2Criterion(ContinuousLossCriterion):
    """Square-rooted squared error ‖ê - e(w)‖ (Kumar & Tsvetkov 2019, section 4.2)."""

    def token_losses(self, e_hat, target_ids, target_vectors, layer):
        return l2_loss(e_hat, target_vectors)


@register_criterion("max_margin", dataclass=MaxMarginConfig)
class MaxMarginCriterion(ContinuousLossCriterion):
    """max(0, γ + cos(ê, e_neg) - cos(ê, e(w))) with the most informative negative (Kumar & Tsvetkov 2019,
    section 4.2, after Lazaridou et al. 2015). Its negative search costs O(V) per token."""

    def __init__(self, task, sentence_avg, margin=0.5):
        super().__init__(task, sentence_avg)
        if not margin > 0:
            raise OutlayersConfigError(f"--margin must be > 0, got {margin}")
        self.margin = margin

    def token_losses(self, e_hat, target_ids, target_vectors, layer):
        return max_margin_loss(e_hat, target_ids, layer.target_table, self.margin, candidates=layer.decodable,
                               chunk_size=layer.chunk_size)
