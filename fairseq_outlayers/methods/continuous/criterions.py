"""Criterions for continuous outputs (Kumar & Tsvetkov 2019): ``vmf_nll``, ``cosine``, ``l2``, ``max_margin``.

They need ``--output-layer continuous``: the model returns ê (B, T, m) and the criterion compares it with the
frozen unit target vector e(w) of each reference word (the per-token maths is in ``vmf_losses.py``).
Padding positions are ignored. Besides the loss (natural units, per token, or per sentence with ``--sentence-avg``)
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
from fairseq_outlayers.value_checks import CheckedOptions, Range, check_values, fmt

from .bessel import FAST_MIN_DIM
from .continuous_output import ContinuousOutput
from .vmf_losses import (cosine_loss, cosine_similarity, kappa_alarm_bounds, l2_loss, max_margin_loss,
                         synthetic_margin_loss, vmf_nll_loss, vmf_released_loss)

logger = logging.getLogger(__name__)

VMF_VARIANTS = ChoiceEnum(["reg1+reg2", "reg1", "reg2", "plain", "released"])
MARGIN_NEGATIVES = ChoiceEnum(["informative", "synthetic"])
#: share of the tokens (over one logged interval or one validation) above which a κ alarm warns
KAPPA_ALARM_SHARE = 0.5
#: fewer tokens than this in a reduction: no alarm (one tiny batch says little)
KAPPA_ALARM_MIN_TOKENS = 1000
#: the warnings of the running criterion: {"low"/"high": message}; each is logged once per run (the criterion,
#: built once a run, clears them: fairseq's metrics reduce with a static method, which sees no instance)
_ALARMS = {}
_WARNED = set()


#: the allowed values of the continuous criterions' options (checked when the options are parsed and when built)
VMF_RANGES = {
    "vmf_lambda1": Range(0, 1, high_open=True, why="at 1 or more the κ-derivative A_m(κ) - cos + λ1 of reg1 is "
                         "positive for every cosine, so |ê| collapses to 0"),
    "vmf_lambda2": Range(0, 1, low_open=True),
    "vmf_released_lambda": Range(0, 1),
    "vmf_warmup_updates": Range(0, integer=True, why="a number of updates"),
}
MARGIN_RANGES = {"margin": Range(0, 2, low_open=True, why="the gap between two cosines is at most 2, so a larger "
                                 "margin is never met and only shifts the loss")}
#: --margin with --margin-negative synthetic, whose loss is γ + sin θ - cos θ
SYNTHETIC_MARGIN_RANGE = Range(0, 1, low_open=True, why="with --margin-negative synthetic the gap cos θ - sin θ is at "
                               "most 1, so a larger margin is never met and only shifts the loss")
#: the --vmf-variant values that read each λ
VMF_USED_BY = {"vmf_lambda1": ("reg1", "reg1+reg2"), "vmf_lambda2": ("reg2", "reg1+reg2"),
               "vmf_released_lambda": ("released",)}


def check_vmf_options(variant, lambda1, lambda2, released_lambda, log_cm="exact", compile_=False):
    """One-line errors for vmf_nll options that cannot train or would be ignored; called when the criterion is
    built and, earlier, by the model core when the command line is checked (before any data is read)."""
    variant = str(variant)
    if compile_ and str(log_cm) == "approx":
        raise OutlayersConfigError(
            "--vmf-compile compiles the exact log C_m; --vmf-log-cm approx would run eagerly and ignore it: drop "
            "one of the two")
    values = {"vmf_lambda1": lambda1, "vmf_lambda2": lambda2, "vmf_released_lambda": released_lambda}
    defaults = VMFNLLCriterion.option_defaults()
    check_values(VMF_RANGES, values, defaults)
    for name, value in values.items():  # a λ of another variant set to other than its default would be ignored
        if variant not in VMF_USED_BY[name] and value != defaults[name]:
            flag, users = "--" + name.replace("_", "-"), ", ".join(VMF_USED_BY[name])
            raise OutlayersConfigError(
                f"{flag} {fmt(value)} is read only by --vmf-variant {users}; --vmf-variant {variant} would ignore "
                f"it: drop {flag}, or select --vmf-variant {VMF_USED_BY[name][0]}")
    if variant == "reg1+reg2" and lambda1 >= lambda2:
        raise OutlayersConfigError(
            f"--vmf-variant reg1+reg2 with --vmf-lambda1 {lambda1} >= --vmf-lambda2 {lambda2} cannot train: its "
            f"κ-derivative A_m(κ) + λ1 - λ2·cos is > 0 for every cosine, so |ê| collapses to 0; use the default "
            f"--vmf-variant released, or reg1+reg2 with --vmf-lambda1 below --vmf-lambda2 (e.g. 0.02)")


def check_margin_options(negative, margin):
    """One-line errors for max_margin options out of range; called when the criterion is built and, earlier, by
    the model core when the command line is checked."""
    check_values(MARGIN_RANGES, {"margin": margin}, MaxMarginCriterion.option_defaults())
    if str(negative) == "synthetic":
        SYNTHETIC_MARGIN_RANGE.check("--margin", margin, "give --margin in that range, or leave it out for its "
                                     "default 0.5")


@dataclass
class ContinuousLossConfig(FairseqDataclass):
    sentence_avg: bool = II("optimization.sentence_avg")


@dataclass
class VMFNLLConfig(ContinuousLossConfig):
    vmf_variant: VMF_VARIANTS = field(
        default="released",
        metadata={"help": "released (default): the authors' code, -log C_m(κ) + log(1+κ)(λ - cos), which keeps "
                  "κ ≈ (m·cos)^1/2; reg1: -log C_m(κ) - ê.e + λ1 κ; reg2: -log C_m(κ) - λ2 ê.e (eq. 3); "
                  "reg1+reg2: -log C_m(κ) - λ2 ê.e + λ1 κ (needs λ1 < λ2); plain: NLLvMF. The exact forms need "
                  "κ ≈ m·cos (docs/continuous-outputs.md)"})
    vmf_lambda1: float = field(default=0.2, metadata={"help": "λ1 of reg1 and reg1+reg2 (paper: 0.2), in [0, 1)"})
    vmf_lambda2: float = field(default=0.1, metadata={"help": "λ2 of reg2 and reg1+reg2 (paper: 0.1), in (0, 1]"})
    vmf_released_lambda: float = field(default=0.2, metadata={"help": "λ of the released variant (0.2), in [0, 1]"})
    vmf_log_cm: ChoiceEnum(["exact", "approx"]) = field(
        default="exact", metadata={"help": "log C_m(κ): exact (Bessel: float64 for m < 32 or float64 "
                                   "input, else float32) or the paper's appendix approximation"})
    vmf_warmup_updates: int = field(
        default=0, metadata={"help": "train with the cosine loss 1 - cos for the first N updates, then with the vMF "
                             "loss (a warm-up; 0: vMF from the start)"})
    vmf_compile: bool = field(
        default=False, metadata={"help": "compute the vMF loss (norms, exact log C_m, loss and gradient) as one "
                                 "torch.compile graph: fused GPU kernels instead of one launch per operation. Compiles once "
                                 "per process (seconds); where torch.compile fails it warns once and runs eagerly. "
                                 "Needs m >= 32 (smaller m runs eagerly)"})


@dataclass
class MaxMarginConfig(ContinuousLossConfig):
    margin: float = field(default=0.5, metadata={"help": "margin γ of the max-margin loss (paper: 0.5), in (0, 2]; "
                                                 "in (0, 1] with --margin-negative synthetic"})
    margin_negative: MARGIN_NEGATIVES = field(
        default="informative",
        metadata={"help": "the negative e_neg: informative (default): the word argmax_(j≠w) cos(ê, e_j) - "
                  "cos(e(w), e_j), an O(V) search per token (Kumar & Tsvetkov 2019, after Lazaridou et al. 2015); "
                  "synthetic: u_orth, the component of ê orthogonal to e(w), normalised, so the loss is "
                  "max(0, γ + sin θ - cos θ) and reads no other row (syn-margin, Bhat, Kumar & Tsvetkov 2019)"})


def continuous_output_layer(model) -> ContinuousOutput:
    layer = getattr(getattr(model, "decoder", None), "output_projection", None)
    if not isinstance(layer, ContinuousOutput):
        raise OutlayersConfigError("the continuous criterions (vmf_nll, cosine, l2, max_margin) need "
                                   "--output-layer continuous --target-vectors FILE")
    return layer


class ContinuousLossCriterion(CheckedOptions, FairseqCriterion):
    """Shared forward pass and metrics; subclasses define ``token_losses``."""

    #: it trains the output layers that are not softmax-type (``models.registry.criterion_trains``)
    softmax_type = False
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
        if not torch.isfinite(e_hat).all():  # one host sync per step; fairseq's logging syncs anyway
            raise FloatingPointError(
                f"the decoder predicted a NaN or infinite vector ê ({type(self).__name__}): training diverged; "
                "restart from an earlier checkpoint with a lower --lr (or --clip-norm), or in fp32 if this ran "
                "in --fp16")
        vectors = layer.target_table.index_select(0, target).float()
        keep = target.ne(self.padding_idx)
        losses = torch.where(keep, self.token_losses(e_hat, target, vectors, layer), 0.0)
        loss = losses.sum() if reduce else losses
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        with torch.no_grad():
            cos = torch.where(keep, cosine_similarity(e_hat, vectors), 0.0).sum()
            kappa = torch.linalg.vector_norm(e_hat, dim=-1)
            norm = torch.where(keep, kappa, 0.0).sum()
        logging_output = {
            "loss": losses.sum().data, "ntokens": sample["ntokens"], "nsentences": sample["target"].size(0),
            "sample_size": sample_size, "cos_sum": cos.data, "norm_sum": norm.data,
        }
        if hasattr(self, "kappa_alarm_counts"):
            self._dim = e_hat.size(-1)
            low, high = self.kappa_alarm_counts(kappa, keep)
            logging_output.update(kappa_low=low.data, kappa_high=high.data, kappa_n=keep.sum().data)
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
        kappa_n = total("kappa_n")
        if kappa_n > 0:
            for kind in ("low", "high"):
                share = total(f"kappa_{kind}") / kappa_n
                metrics.log_scalar(f"kappa_{kind}", 100.0 * share, kappa_n, round=2)
                if (share > KAPPA_ALARM_SHARE and kappa_n >= KAPPA_ALARM_MIN_TOKENS and kind in _ALARMS
                        and kind not in _WARNED):
                    _WARNED.add(kind)
                    logger.warning(_ALARMS[kind].format(share=share))
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
    variant of the authors' released code. log C_m(κ) is exact (Bessel, ``bessel.py``) unless --vmf-log-cm approx."""

    option_ranges = VMF_RANGES
    options_config = VMFNLLConfig

    @classmethod
    def check_options(cls, read):
        """A vMF setting that cannot train is refused before any data is read."""
        super().check_options(read)
        defaults = cls.option_defaults()
        check_vmf_options(*(read(name, defaults[name]) for name in ("vmf_variant", "vmf_lambda1", "vmf_lambda2",
                                                                   "vmf_released_lambda", "vmf_log_cm",
                                                                   "vmf_compile")))

    def __init__(self, task, sentence_avg, vmf_variant="released", vmf_lambda1=0.2, vmf_lambda2=0.1,
                 vmf_released_lambda=0.2, vmf_log_cm="exact", vmf_warmup_updates=0, vmf_compile=False):
        super().__init__(task, sentence_avg)
        variant = str(vmf_variant)
        check_vmf_options(variant, vmf_lambda1, vmf_lambda2, vmf_released_lambda, vmf_log_cm, vmf_compile)
        check_values(VMF_RANGES, {"vmf_warmup_updates": vmf_warmup_updates}, self.option_defaults())
        self.warmup_updates = vmf_warmup_updates
        self._warming = False
        _ALARMS.clear()
        _WARNED.clear()
        self.variant = variant
        self.released = variant == "released"
        self.released_lambda = vmf_released_lambda
        self.lambda1 = vmf_lambda1 if variant in ("reg1", "reg1+reg2") else 0.0
        self.lambda2 = vmf_lambda2 if variant in ("reg2", "reg1+reg2") else 1.0
        self.approximate = str(vmf_log_cm) == "approx"
        self.compiled = bool(vmf_compile)
        self._bounds = {}  # m -> (κ_low, κ_high)

    def kappa_bounds(self, m):
        """(κ_low, κ_high) of the κ alarms for this loss at dimension m (``vmf_losses.kappa_alarm_bounds``)."""
        if m not in self._bounds:
            low, high = kappa_alarm_bounds(m, self.variant, self.lambda1, self.lambda2, self.released_lambda)
            self._bounds[m] = (low, high)
            what = f"--vmf-variant {self.variant}"
            _ALARMS["low"] = (
                f"κ alarm: {{share:.0%}} of the tokens have |ê| < {low:.3g}, where the norm encodes less agreement "
                f"with the target than a random direction (the loss pulls ê to the origin: {what} with these "
                f"lambdas makes unsure predictions collapse and their words are lost in decoding); use the "
                f"default --vmf-variant released, or a smaller --vmf-lambda1")
            _ALARMS["high"] = (
                f"κ alarm: {{share:.0%}} of the tokens have |ê| > {high:.3g}, a concentration that claims a cosine "
                f"within m^-1/2 of a perfect match (the norm runs away: each update turns ê by about 1/κ of its "
                f"step and beam scores are one-hot); use the default --vmf-variant released (κ ≈ (m·cos)^1/2), "
                f"or decode with --continuous-score-scale")
        return self._bounds[m]

    def kappa_alarm_counts(self, kappa, keep):
        if self._warming:  # the cosine loss leaves |ê| free: no alarm is meaningful yet
            zero = keep.new_zeros(())
            return zero, zero
        low, high = self.kappa_bounds(self._dim)
        return ((kappa < low) & keep).sum(), ((kappa > high) & keep).sum()

    def token_losses(self, e_hat, target_ids, target_vectors, layer):
        warming = layer.num_updates < self.warmup_updates
        if self._warming and not warming:
            logger.info(f"vmf_nll: cosine warm-up over after {self.warmup_updates} updates; training with the vMF "
                        f"loss from now on")
        self._warming = warming
        if warming:
            return cosine_loss(e_hat, target_vectors)
        if self.compiled and "compile" not in _WARNED:
            _WARNED.add("compile")
            if e_hat.size(-1) < FAST_MIN_DIM:
                logger.warning(f"--vmf-compile: m = {e_hat.size(-1)} < {FAST_MIN_DIM} takes the float64 recurrence "
                               f"for log C_m, which is not compiled; the loss runs eagerly")
            else:
                logger.info("--vmf-compile: the vMF loss runs through torch.compile (the first training and the "
                            "first validation step compile it, seconds each)")
        if self.released:
            return vmf_released_loss(e_hat, target_vectors, self.released_lambda, self.approximate, self.compiled)
        return vmf_nll_loss(e_hat, target_vectors, self.lambda1, self.lambda2, self.approximate, self.compiled)


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
    section 4.2, after Lazaridou et al. 2015), whose search costs O(V) per token, or with --margin-negative
    synthetic the syn-margin loss of Bhat, Kumar & Tsvetkov (2019): e_neg = u_orth, no search."""

    option_ranges = MARGIN_RANGES
    options_config = MaxMarginConfig

    @classmethod
    def check_options(cls, read):
        super().check_options(read)
        defaults = cls.option_defaults()
        check_margin_options(read("margin_negative", defaults["margin_negative"]), read("margin", defaults["margin"]))

    def __init__(self, task, sentence_avg, margin=0.5, margin_negative="informative"):
        super().__init__(task, sentence_avg)
        check_margin_options(margin_negative, margin)
        self.margin = margin
        self.synthetic = str(margin_negative) == "synthetic"

    def token_losses(self, e_hat, target_ids, target_vectors, layer):
        if self.synthetic:
            return synthetic_margin_loss(e_hat, target_vectors, self.margin)
        return max_margin_loss(e_hat, target_ids, layer.target_table, self.margin, candidates=layer.decodable,
                               chunk_size=layer.chunk_size)
