"""The output layers' matrix product over flattened rows (``linear_rows``): one ``mm`` when decoding, with the same
values, bit for bit, as the product training runs; training's logits and gradients unchanged."""
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from fairseq_outlayers.methods.fixed.fixed_random import FixedRandomOutput
from fairseq_outlayers.core.output_layer import linear_rows
from fairseq_outlayers.methods.baselines.softmax import LearnedSoftmaxOutput


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def _decoding_features(rows=12, dim=16):
    """What SequenceGenerator hands the output layer: a (rows, 1, d) view of a (1, rows, d) tensor."""
    x = torch.randn(1, rows, dim).transpose(0, 1)
    assert x.is_contiguous() and x.stride(0) != x.stride(1) * x.size(1)
    return x


def test_decoding_product_is_one_mm_and_equals_the_folded_product_bit_for_bit():
    torch.manual_seed(0)
    x, weight, bias = _decoding_features(), torch.randn(50, 16), torch.randn(50)
    trained = weight.clone().requires_grad_()  # a weight with gradients: torch folds the rows into one mm
    for b in (None, bias):
        with torch.no_grad():
            with _Ops() as ops:
                out = linear_rows(x, weight, b)
            folded = F.linear(x.contiguous(), trained, b)
        assert "bmm" not in ops.names and ({"mm", "addmm"} & set(ops.names))
        assert out.shape == (12, 1, 50) and torch.equal(out, folded)
    with torch.no_grad(), _Ops() as ops:  # what the layers did before: a batched product with a broadcast weight
        F.linear(x.contiguous(), weight)
    assert "bmm" in ops.names


def test_fixed_layer_decodes_with_one_mm_and_the_values_of_training():
    torch.manual_seed(0)
    layer = FixedRandomOutput(40, 16).eval()
    x = _decoding_features()
    with torch.no_grad(), _Ops() as ops:
        out = layer(x)
    assert "bmm" not in ops.names
    assert torch.equal(out, F.linear(x.contiguous(), layer.weight.clone().requires_grad_()).detach())


def test_training_logits_and_gradients_unchanged():
    """The softmax layer on training's transposed (T x B -> B x T) features: the logits and every gradient equal
    those of the former ``F.linear(features.contiguous(), weight, bias)``, bit for bit."""
    torch.manual_seed(0)
    layer = LearnedSoftmaxOutput(30, 16, bias=True).train()
    base = torch.randn(7, 5, 16)
    results = []
    for former in (False, True):
        feats = base.clone().requires_grad_()
        x = feats.transpose(0, 1)
        layer.zero_grad(set_to_none=True)
        out = F.linear(x.contiguous(), layer.weight, layer.bias) if former else layer(x)
        out.square().sum().backward()
        results.append((out.detach(), feats.grad, layer.weight.grad.clone(), layer.bias.grad.clone()))
    for new, old in zip(*results):
        assert torch.equal(new, old)
