"""``--criterion sampled_softmax``: cross-entropy over a sampled sub-vocabulary (negative sampling).

Pappas et al. (2018, section 3.2) train large-vocabulary models on a subset V' of the vocabulary: every word
that is a target somewhere in the batch (the positives) plus negatives drawn uniformly at random from the rest,
until V' holds a fixed fraction of V (50 %, 25 % or 5 % in their Table 4). The softmax is normalised over V'
only, so only the |V'| rows of the output matrix are computed and receive gradients; that is where the speed
comes from. Their reference implementation also keeps the padding symbol in V', and so does this one.

Validation (``model.training`` is False) and decoding use the full softmax, so the reported validation loss is
the ordinary cross-entropy. With ``--sample-ratio 1`` the criterion is exactly the full-softmax cross-entropy.

The paper's softmax over V' is uncorrected (``--sample-correction none``, the default): a word that is a target
somewhere in the batch is always in V', any other word only with probability r = (negatives drawn) / (words not
in the batch), so the normaliser leaves out most of the mass of the words outside the batch, and at the full
softmax the trained model under-predicts the words that are usually in the batch, the frequent ones.
``--sample-correction logq`` adds -log r to the logits of the drawn negatives (log Q correction, as in Jean et al.
2015 and Bengio & Senecal 2008, with Q the probability that a word is in V' given the batch: 1 for the batch's
targets, r for the rest): the normaliser over V' becomes sum over the batch's targets of exp(s) plus
sum over the negatives of exp(s) / r, an unbiased estimate of the full softmax's normaliser given the batch.

The criterion works with every softmax-type output layer, each written as a factorised softmax
(``fairseq_outlayers.core.output_layer.FactorisedSoftmaxOutput``): it asks the layer for
``sampled_logits(features, ids)``.

Randomness: each worker draws its own negatives from a private generator seeded with
(fairseq's per-update seed ``--seed + num_updates``, the batch's index within the update over all workers). Rank
r of W takes the update's batches r, r + W, ... (fairseq's sharding), so its micro-batch m is batch m * W + r: W
processes draw what one process with W times the ``--update-freq`` draws, batch for batch. The run is reproducible
from ``--seed`` (also when resumed from a checkpoint), workers do not draw the same negatives, and the global
random state that dropout uses is left untouched.
"""
import math
from dataclasses import dataclass, field
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics
from omegaconf import II

from fairseq_outlayers.core.output_layer import FactorisedSoftmaxOutput
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.losses.negative_sampling import mix_seed, sample_vocabulary, sampling_correction
from fairseq_outlayers.value_checks import CheckedOptions, Range, check_values


# ---------------------------------------------------------------------------------------------------------------
# the loss over V' (sampling itself: fairseq_outlayers.losses.negative_sampling)
# ---------------------------------------------------------------------------------------------------------------
def sampled_softmax_loss(logits: torch.Tensor, targets: torch.Tensor, epsilon: float = 0.0,
                         ignore_index: Optional[int] = None, reduce: bool = True
                         ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Summed (label-smoothed) cross-entropy of ``targets`` under a softmax over the last dimension of ``logits``
    (the sampled vocabulary); returns ``(loss, nll_loss)`` like fairseq's ``label_smoothed_nll_loss``, whose
    smoothing mass is spread over the classes present (here: V'). ``reduce=False`` gives per-position values."""
    lprobs = F.log_softmax(logits.float(), dim=-1).view(-1, logits.size(-1))
    return label_smoothed_nll_loss(lprobs, targets.reshape(-1), epsilon, ignore_index=ignore_index, reduce=reduce)


# ---------------------------------------------------------------------------------------------------------------
# the fairseq criterion
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class SampledSoftmaxCriterionConfig(FairseqDataclass):
    sample_ratio: float = field(
        default=0.25,
        metadata={"help": "fraction of the target vocabulary in each training softmax, in (0, 1]: the batch's "
                          "targets plus uniform negatives (paper: 0.5, 0.25, 0.05; 1 = full softmax)"},
    )
    label_smoothing: float = field(
        default=0.0,
        metadata={"help": "epsilon for label smoothing (over the sampled vocabulary in training), 0 = none"},
    )
    sample_correction: ChoiceEnum(["none", "logq"]) = field(
        default="none",
        metadata={"help": "none: the softmax over V' as it is (the paper); logq: add -log r to the logits of the "
                          "drawn negatives, r their chance of being drawn, so that the normaliser over V' estimates "
                          "the full softmax's without bias given the batch"},
    )
    sentence_avg: bool = II("optimization.sentence_avg")


@register_criterion("sampled_softmax", dataclass=SampledSoftmaxCriterionConfig)
class SampledSoftmaxCriterion(CheckedOptions, FairseqCriterion):
    """Negative-sampling cross-entropy for softmax-type output layers (Pappas et al. 2018, section 3.2)."""

    #: it trains the softmax-type output layers (``models.registry.criterion_trains``)
    softmax_type = True
    #: checked here and, for outlayers_* models, by ``check_options`` when the options are parsed
    option_ranges = {
        "sample_ratio": Range(0, 1, low_open=True, why="a fraction of the vocabulary, e.g. 0.25 for 25 %"),
        "label_smoothing": Range(0, 1, high_open=True),
    }
    options_config = SampledSoftmaxCriterionConfig

    def __init__(self, task, sentence_avg, sample_ratio=0.25, label_smoothing=0.0, sample_correction="none"):
        super().__init__(task)
        check_values(self.option_ranges, {"sample_ratio": sample_ratio, "label_smoothing": label_smoothing},
                     self.option_defaults())
        self.sentence_avg = sentence_avg
        self.sample_ratio = sample_ratio
        self.eps = label_smoothing
        if sample_correction not in ("none", "logq"):
            raise OutlayersConfigError(f"--sample-correction must be none or logq, got {sample_correction!r}")
        self.correction = sample_correction
        self._seed_base = None
        self._micro_batch = 0
        self._generators = {}

    # -- helpers ---------------------------------------------------------------------------------------------
    @staticmethod
    def output_layer_of(model):
        decoder = getattr(model, "decoder", None)
        layer = getattr(decoder, "output_projection", None)
        if not isinstance(layer, FactorisedSoftmaxOutput):  # it has sampled_logits
            from fairseq_outlayers.core.registry import layers_trained_by

            args = getattr(model, "outlayers_args", None)
            name = getattr(args, "output_layer", None) or type(layer).__name__
            raise OutlayersConfigError(
                f"--criterion sampled_softmax needs a softmax-type output layer "
                f"({', '.join(layers_trained_by(SampledSoftmaxCriterion))}) of an outlayers_* model, but the "
                f"model's output layer is '{name}'; use another --output-layer or the criterion made for that layer"
            )
        return layer

    def _generator(self, device) -> torch.Generator:
        """This worker's generator for the current micro-batch (seeded, see the module docstring)."""
        base = torch.initial_seed()  # fairseq's trainer re-seeds with --seed + num_updates before every update
        if base != self._seed_base:
            self._seed_base, self._micro_batch = base, 0
        from fairseq.distributed.utils import get_global_rank, get_global_world_size

        batch = self._micro_batch * get_global_world_size() + get_global_rank()  # the update's batch, all ranks
        seed = mix_seed(base, 0, batch)  # one process: (base, 0, micro-batch), as before ranks were counted in
        self._micro_batch += 1
        key = str(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device=device)
        gen = self._generators[key]
        gen.manual_seed(seed)
        return gen

    # -- forward ---------------------------------------------------------------------------------------------
    def forward(self, model, sample, reduce=True):
        layer = self.output_layer_of(model)
        target = model.get_targets(sample, None)
        pad = self.padding_idx
        if model.training:
            features, _ = model(**sample["net_input"], features_only=True)
            ids, remapped = sample_vocabulary(target, layer.dictionary_size, self.sample_ratio, pad=pad,
                                              generator=self._generator(target.device))
            logits = layer.sampled_logits(features, ids)
            if self.correction == "logq":
                logits = logits + sampling_correction(ids, target, layer.dictionary_size, pad).to(logits.dtype)
            pad_index = int(torch.searchsorted(ids, torch.tensor(pad, device=ids.device)))
            loss, nll_loss = sampled_softmax_loss(logits, remapped, self.eps, ignore_index=pad_index, reduce=reduce)
            vocab = ids.numel()
        else:
            net_output = model(**sample["net_input"])
            lprobs = model.get_normalized_probs(net_output, log_probs=True)
            loss, nll_loss = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1), self.eps,
                                                     ignore_index=pad, reduce=reduce)
            vocab = lprobs.size(-1)
        ntokens = sample["ntokens"]
        sample_size = sample["target"].size(0) if self.sentence_avg else ntokens
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": ntokens,
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
            "sampled_vocab": vocab,
            "sampled_vocab_count": 1,
        }
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        loss_sum = sum(log.get("loss", 0) for log in logging_outputs)
        nll_loss_sum = sum(log.get("nll_loss", 0) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        vocab = sum(log.get("sampled_vocab", 0) for log in logging_outputs)
        vocab_count = sum(log.get("sampled_vocab_count", 0) for log in logging_outputs)
        metrics.log_scalar("loss", loss_sum / sample_size / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", nll_loss_sum / ntokens / math.log(2), ntokens, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))
        if vocab_count > 0:
            metrics.log_scalar("vocab", vocab / vocab_count, vocab_count, round=0)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
