"""The decodings of a ledger run beyond training (``runner.py`` runs them): the score scale a row's ``# scales:``
chooses on the validation split, the further test decodes of ``# decodes:`` (added to a recorded run while its
checkpoint is in ``--work``), and the check that a row's seeds are decoded alike."""
import json
import os
from typing import Dict, List, Optional, Tuple

from fairseq_outlayers.command_line import option_value
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab.fairseq_runs import log
from fairseq_outlayers.lab.ledger import records
from fairseq_outlayers.lab.ledger.run_state import checkpoint_state
from fairseq_outlayers.lab.ledger.rows import LedgerRow, decode_key, row_options
from fairseq_outlayers.outfiles import write_text
from fairseq_outlayers.tools.evaluation.scoring import evaluate
from fairseq_outlayers.tools.rawtext import Preparation


def check_decoding(existing: List[Dict], row: LedgerRow, s) -> None:
    """An error when a recorded seed of ``row`` was tested at another beam, or with(out) a score scale chosen on
    validation, than the row now asks for (``# test-beam:``, ``# scales:``): its seeds are averaged, so they must
    be decoded alike."""
    beam, tuned = row.testing_beam(s.beam), bool(row.scales)
    for r in existing:
        if r["row"] != row.name or r["table"] != row.table:
            continue
        decoding = r.get("decoding") or {}
        if decoding.get("beam", beam) != beam or ("scale_validation" in decoding) != tuned:
            was = f"beam {decoding.get('beam')}" + (", scale chosen on validation" if "scale_validation" in decoding
                                                    else "")
            now = f"beam {beam}" + (", scale chosen on validation" if tuned else "")
            raise OutlayersConfigError(
                f"{row.path}: seed {r['seed']} of row '{row.name}' was tested at {was}, the row now asks for {now}; "
                "the seeds of a row are averaged, so give the new decoding a new row (a new row file), or move "
                "the old records away to run the row again")


def choose_scale(row: LedgerRow, ckpt: str, run_dir: str, prep: Preparation, beam: int, direction: List[str],
                 s) -> Tuple[Optional[float], Dict[str, float]]:
    """(the scale of ``row.scales`` whose decode at ``beam`` scores best on the validation split -- None: the model's
    own --, {"none" or "S": validation sacreBLEU}); ties go to the first candidate. Never reads the test set."""
    if not s.valid_ref:
        raise OutlayersConfigError(f"{row.path}: '# scales:' chooses the score scale on the validation split; give "
                                   "--valid-ref (the raw reference of the data's validation split)")
    option = decode_scale(row_options(row, 1, s.patience, s.max_epoch, s.beam))
    if option is None:
        raise OutlayersConfigError(f"{row.path}: '# scales:' is for an output layer that declares a score scale "
                                   "for decoding (its registry entry's decode_scale)")
    scores, best = {}, None
    for scale in row.scales:
        key = "none" if scale is None else f"{scale:g}"
        extra = direction + ([] if scale is None else ["--model-overrides", repr({option: scale})])
        result, _, _, _ = evaluate(prep, row.data_bin, ckpt, os.path.join(run_dir, f"eval-valid-beam{beam}-{key}"),
                                   s.valid_ref, None, beam, s.lenpen, s.batch_size, subset="valid", extra=extra,
                                   env=s.env)
        scores[key] = result["sacrebleu"]
        log(f"{row.name}: validation beam {beam} scale {key}: sacreBLEU {scores[key]}", "ledger")
        if best is None or scores[key] > scores["none" if best[0] is None else f"{best[0]:g}"]:
            best = (scale,)
    return best[0], scores


def add_decodes(row: LedgerRow, record: Dict, s) -> Dict:
    """``record`` with the row's ``# decodes:`` it lacks on the main test set (sacreBLEU under ``decodes``), made
    from the tested checkpoint while it is in ``--work``; a decode with a score scale only for an output layer that
    declares one (``decode_scale``). The record file is rewritten (atomically) when one is added."""
    test = s.test_name
    scaled = any(sc is not None for _, sc in row.decodes)
    scale_option = decode_scale(record["options"]) if scaled else None
    wanted = [(b, sc) for b, sc in row.decodes if sc is None or scale_option]
    have = (record.get("decodes") or {}).get(test, {})
    missing = [(b, sc) for b, sc in wanted if decode_key(b, sc) not in have]
    if not missing:
        return record
    train_dir = os.path.join(s.work, f"{row.training_name()}.seed{record['seed']}")
    run_dir = os.path.join(s.work, f"{row.name}.seed{record['seed']}")
    ckpt = (os.path.join(run_dir, "checkpoint_after.pt") if row.after
            else os.path.join(train_dir, "checkpoint_last.pt" if row.budget is not None else "checkpoint_best.pt"))
    wanted_updates = record.get("best_updates", record["updates"])

    if not os.path.exists(ckpt) or checkpoint_state(ckpt)["updates"] != wanted_updates:
        why = "is gone" if not os.path.exists(ckpt) else f"is not the recorded model (not at update {wanted_updates})"
        log(f"{row.name} seed {record['seed']}: {ckpt} {why}; decodes {' '.join(decode_key(*d) for d in missing)} "
            "not made", "ledger")
        return record
    src_lang, tgt_lang = row.languages()
    prep = Preparation.from_data(row.data_bin, src_lang, tgt_lang)
    direction = ["--source-lang", src_lang, "--target-lang", tgt_lang] if src_lang else []
    ref = record["test"][test].get("reference_file") or s.test_ref
    added = dict(have)
    for beam, scale in missing:
        key = decode_key(beam, scale)
        extra = direction + (["--model-overrides", repr({scale_option: scale})] if scale else [])
        scores, _, _, _ = evaluate(prep, row.data_bin, ckpt, os.path.join(run_dir, f"eval-{test}-beam{key}"), ref,
                                   None, beam, s.lenpen, s.batch_size, extra=extra, env=s.env)
        added[key] = scores["sacrebleu"]
        log(f"{row.name} seed {record['seed']}: {test} beam {key}: sacreBLEU {added[key]}", "ledger")
    record = dict(record, decodes=dict(record.get("decodes") or {}, **{test: added}))
    write_text(records.record_path(s.ledger, row.name, record["seed"]), json.dumps(record, indent=2) + "\n")
    return record


def decode_scale(options: List[str]) -> Optional[str]:
    """The option a "B@S" decode sets: the output layer's ``decode_scale`` in the registry, or None."""
    import fairseq_outlayers.models  # noqa: F401  (registers the plugin; loads torch: only for such decodes)
    from fairseq_outlayers.core.registry import OUTPUT_LAYER_REGISTRY

    spec = OUTPUT_LAYER_REGISTRY.get(option_value(options, "--output-layer", ""))
    return spec.decode_scale if spec is not None else None


