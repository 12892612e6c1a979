"""Plain nn.Modules (no fairseq command-line knowledge): output layers, embeddings, attention."""
from .luong_attention import LuongAttention  # noqa: F401
from .output_layer import FactorisedSoftmaxOutput, OutputLayer  # noqa: F401
from .softmax import LearnedSoftmaxOutput, TiedSoftmaxOutput  # noqa: F401
