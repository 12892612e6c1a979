"""Parameter accounting: the numbers the papers compare methods by.

* total      -- every weight of the model: trained parameters, frozen parameters and fixed weight buffers
* trained    -- parameters the optimiser updates (requires_grad)
* frozen     -- weights that are never updated (frozen parameters, fixed classifiers kept as buffers)
* embedding  -- the source and target input embeddings (a shared matrix counted once)
* output     -- weights owned by the output layer (a tied matrix belongs to the embedding, not counted here)
"""
from typing import Dict

import torch.nn as nn


def _unique_numel(modules) -> int:
    seen, n = set(), 0
    for module in modules:
        if module is None:
            continue
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
    return n


def parameter_report(model: nn.Module) -> Dict[str, int]:
    params = list(model.parameters())  # nn.Module.parameters() already de-duplicates shared tensors
    trained = sum(p.numel() for p in params if p.requires_grad)
    frozen_params = sum(p.numel() for p in params if not p.requires_grad)
    fixed_buffers = sum(m.frozen_numel() for m in model.modules() if hasattr(m, "frozen_numel"))
    encoder, decoder = getattr(model, "encoder", None), getattr(model, "decoder", None)
    embeddings = [getattr(encoder, "embed_tokens", None), getattr(decoder, "embed_tokens", None)]
    output = getattr(decoder, "output_projection", None)
    report = {
        "total": trained + frozen_params + fixed_buffers,
        "trained": trained,
        "frozen": frozen_params + fixed_buffers,
        "embedding": _unique_numel(embeddings),
    }
    if hasattr(output, "parameter_counts"):
        counts = output.parameter_counts()
        report["output"] = counts["owned"] + output.frozen_numel()
        report["output_trained"] = counts["trained"]
    elif output is not None:
        report["output"] = report["output_trained"] = _unique_numel([output])
    return report


def format_parameter_report(report: Dict[str, int]) -> str:
    total = max(report["total"], 1)
    lines = []
    for key, value in report.items():
        lines.append(f"  {key:<15} {value:>14,d}  ({100.0 * value / total:5.1f}% of total)")
    return "\n".join(lines)
