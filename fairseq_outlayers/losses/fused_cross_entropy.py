"""``--criterion fused_cross_entropy``: ``label_smoothed_cross_entropy`` without the N x V logits.

The model runs with ``features_only=True``; the output layer hands over its (V, d) matrix, bias and the features
mapped into the matrix's space (``logit_factors``: the learned, tied or tied-all embedding, the fixed random
classifier with its projection and scale, the joint layer's g_out(E) and g_inp(h)); the loss comes from
``fairseq_outlayers.losses.linear_cross_entropy``: torch's chunked ``F.linear_cross_entropy``, or on CUDA Cut
Cross-Entropy's kernel when it is installed.
Loss, gradients and logged metrics (loss, nll_loss, ppl, accuracy with ``--report-accuracy``) are those of
fairseq's ``label_smoothed_cross_entropy``; padding is ignored. Decoding is unchanged (it never used the criterion).
"""
import logging
from dataclasses import dataclass, field

import torch.nn as nn
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.dataclass import ChoiceEnum

from fairseq_outlayers.core.output_layer import FactorisedSoftmaxOutput
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.losses.linear_cross_entropy import (CCE_MISSING, DEFAULT_BLOCK_ELEMENTS, IMPLS, cce_available,
                                                           check_cce, linear_cross_entropy, resolve_impl,
                                                           torch_op_missing)
from fairseq_outlayers.value_checks import CheckedOptions, Range, check_values

logger = logging.getLogger(__name__)

#: the README's row of this method (``python -m fairseq_outlayers.lab.docs`` renders the table from it)
ABOUT = {"summary": "the softmax-type layers' loss without the N × V logits (Cut Cross-Entropy on CUDA)",
         "paper": "Wijmans et al. 2025", "page": "fused-loss.md"}


@dataclass
class FusedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    fused_impl: ChoiceEnum(list(IMPLS)) = field(
        default="auto",
        metadata={"help": "torch: torch's chunked linear_cross_entropy, any device; cce: Cut Cross-Entropy's CUDA "
                          "kernel (pip install 'fairseq_outlayers[cce]'); auto: the fastest exact one measured on "
                          "the device (cpu: torch), on CUDA cce when installed, else torch"},
    )
    fused_block_elements: int = field(
        default=DEFAULT_BLOCK_ELEMENTS,
        metadata={"help": "torch: most logits held at once, in chunks of token rows (default 16M, 64 MiB in "
                          "float32)"},
    )


def logit_factors(model, features):
    """``(context, weight, bias)`` of the model's output layer, or a one-line error for a layer without them."""
    layer = getattr(getattr(model, "decoder", None), "output_projection", None)
    if isinstance(layer, FactorisedSoftmaxOutput):
        return layer.logit_factors(features)
    if type(layer) is nn.Linear:  # fairseq's own Transformer decoder
        return features, layer.weight, layer.bias
    from fairseq_outlayers.core.registry import layers_trained_by

    args = getattr(model, "outlayers_args", None)
    name = getattr(args, "output_layer", None) or type(layer).__name__
    raise OutlayersConfigError(
        f"--criterion fused_cross_entropy needs an output layer that is one (V, d) matrix "
        f"({', '.join(layers_trained_by(FusedCrossEntropyCriterion))}), but the model's output layer is '{name}'; "
        "use --criterion label_smoothed_cross_entropy")


@register_criterion("fused_cross_entropy", dataclass=FusedCrossEntropyConfig)
class FusedCrossEntropyCriterion(CheckedOptions, LabelSmoothedCrossEntropyCriterion):
    """Label-smoothed cross-entropy from the output layer's matrix, without the logits."""

    #: it trains the softmax-type output layers (``models.registry.criterion_trains``)
    softmax_type = True
    #: checked here and, for outlayers_* models, by ``check_options`` when the options are parsed
    option_ranges = {
        "label_smoothing": Range(0, 1, high_open=True),
        "fused_block_elements": Range(1, None, integer=True),
    }
    options_config = FusedCrossEntropyConfig

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False,
                 fused_impl="auto", fused_block_elements=DEFAULT_BLOCK_ELEMENTS):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        check_values(self.option_ranges, {"label_smoothing": label_smoothing,
                                          "fused_block_elements": fused_block_elements}, self.option_defaults())
        if fused_impl not in IMPLS:
            raise OutlayersConfigError(f"--fused-impl must be one of {', '.join(IMPLS)}, got {fused_impl!r}")
        if fused_impl == "cce" and not cce_available():
            raise OutlayersConfigError(f"--fused-impl cce {CCE_MISSING}; or use --fused-impl torch")
        # torch's path needs torch 2.13; auto with Cut Cross-Entropy installed is checked once it has chosen
        if torch_op_missing() and (fused_impl == "torch" or (fused_impl == "auto" and not cce_available())):
            raise OutlayersConfigError(f"--criterion fused_cross_entropy --fused-impl {fused_impl} "
                                       f"{torch_op_missing()}")
        self.impl = fused_impl
        self.block_elements = fused_block_elements
        self._told = False

    def forward(self, model, sample, reduce=True):
        features, _ = model(**sample["net_input"], features_only=True)
        x, weight, bias = logit_factors(model, features)
        target = model.get_targets(sample, None)
        if self.ignore_prefix_size > 0:
            x = x[:, self.ignore_prefix_size:, :]
            target = target[:, self.ignore_prefix_size:]
        impl = resolve_impl(self.impl, x.device, x.dtype)
        if impl == "cce" and self.impl == "cce" and check_cce(x.device, x.dtype):  # by name: refuse, never fall back
            raise OutlayersConfigError(f"--fused-impl cce fails its check on {x.device} in {x.dtype} "
                                       f"({check_cce(x.device, x.dtype)}); train with --bf16 or --fp16, or use "
                                       "--fused-impl auto (it falls back to torch's path)")
        if impl == "torch" and torch_op_missing():
            raise OutlayersConfigError(f"--criterion fused_cross_entropy --fused-impl {self.impl} "
                                       f"{torch_op_missing()}")
        if not self._told:
            self._told = True
            if self.impl == "auto" and x.is_cuda and impl == "torch":
                if cce_available():
                    logger.warning(f"fused_cross_entropy: Cut Cross-Entropy is installed but failed its check on "
                                   f"this GPU ({check_cce(x.device, x.dtype)}); using torch's linear_cross_entropy")
                else:
                    logger.warning(f"fused_cross_entropy: Cut Cross-Entropy is not installed, using torch's "
                                   f"linear_cross_entropy; the CUDA kernel {CCE_MISSING}")
            logger.info(f"fused_cross_entropy: {impl} implementation, {tuple(weight.shape)} output matrix in "
                        f"{weight.dtype}, features in {x.dtype}")
        out = linear_cross_entropy(x, weight, bias, target, self.eps, ignore_index=self.padding_idx, reduce=reduce,
                                   impl=impl, block_elements=self.block_elements,
                                   return_argmax=self.report_accuracy)
        loss, nll_loss = out[0], out[1]
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if self.report_accuracy:
            argmax, kept = out[2]
            logging_output["n_correct"] = utils.item(argmax.eq(kept).sum())
            logging_output["total"] = kept.numel()
        return loss, sample_size, logging_output
