"""Global attention of Luong, Pham & Manning (2015), with the 'dot' and 'general' score functions.

score(h_t, s_i) = h_t^T s_i (dot) or h_t^T W_a s_i (general); a_t = softmax over source positions;
c_t = sum_i a_ti s_i; the attentional state is tanh(W_c [c_t; h_t]) (their eq. 5), which the LSTM decoder
feeds to the next step (input feeding) and to the output layer.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class LuongAttention(nn.Module):
    SCORES = ("dot", "general")

    def __init__(self, query_dim: int, source_dim: int, output_dim: int, score: str = "general"):
        super().__init__()
        if score not in self.SCORES:
            raise ValueError(f"unknown attention score '{score}'; choose one of {self.SCORES}")
        if score == "dot" and query_dim != source_dim:
            raise ValueError(
                f"dot attention needs the decoder hidden size ({query_dim}) to equal the encoder output size "
                f"({source_dim}); use --attention-type general or change the sizes"
            )
        self.score = score
        self.input_proj = nn.Linear(query_dim, source_dim, bias=False) if score == "general" else None
        self.output_proj = nn.Linear(source_dim + query_dim, output_dim, bias=False)
        for lin in (self.input_proj, self.output_proj):
            if lin is not None:
                nn.init.uniform_(lin.weight, -0.1, 0.1)

    def forward(self, query, source_hids, encoder_padding_mask):
        """query: bsz x query_dim; source_hids: srclen x bsz x source_dim; mask: srclen x bsz (True = pad).
        Returns the attentional state (bsz x output_dim) and the weights (srclen x bsz)."""
        q = self.input_proj(query) if self.input_proj is not None else query
        scores = (source_hids * q.unsqueeze(0)).sum(dim=2)
        if encoder_padding_mask is not None:
            scores = scores.float().masked_fill(encoder_padding_mask, float("-inf")).type_as(scores)
        weights = F.softmax(scores.float(), dim=0).type_as(scores)
        context = (weights.unsqueeze(2) * source_hids).sum(dim=0)
        return torch.tanh(self.output_proj(torch.cat((context, query), dim=1))), weights
