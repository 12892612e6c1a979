"""``outlayers-params CHECKPOINT [--data DIR]``: the parameter report of a trained checkpoint.

Rebuilds the model from the checkpoint (the dictionaries come from the data directory recorded in it, or from
``--data``) and prints total / trained / frozen / embedding / output-layer counts, as the papers compare them.
"""
import argparse
import json
import logging
import os
import sys

from fairseq_outlayers.core.checkpoint_safety import read
from fairseq_outlayers.tools.checkpoints import load_model_ensemble_and_task
from fairseq_outlayers.errors import OutlayersConfigError


def main(argv=None):
    parser = argparse.ArgumentParser(prog="outlayers-params", description=__doc__.strip().splitlines()[0])
    parser.add_argument("checkpoint", help="a checkpoint written by fairseq-train (e.g. checkpoints/checkpoint_best.pt)")
    parser.add_argument("--data", help="data-bin directory with the dictionaries (default: the one recorded in "
                        "the checkpoint)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)

    def fail(message):
        print(f"outlayers-params: error: {message}", file=sys.stderr)
        return 1

    if not os.path.isfile(args.checkpoint):
        return fail(f"checkpoint '{args.checkpoint}' does not exist; pass the path of a .pt file written by "
                    "fairseq-train")
    if args.data is not None and not os.path.isdir(args.data):
        return fail(f"--data '{args.data}' is not a directory; pass the data-bin directory used for training")
    if os.path.getsize(args.checkpoint) == 0:
        return fail(f"checkpoint '{args.checkpoint}' is empty (0 bytes): an interrupted save? use another "
                    "checkpoint of the run (e.g. checkpoint_best.pt or the newest checkpointN.pt)")


    from fairseq_outlayers.parameter_counts import format_parameter_report, parameter_report

    overrides = {"data": args.data} if args.data else {}
    core = logging.getLogger("fairseq_outlayers.core.build")
    level = core.level
    core.setLevel(logging.WARNING)  # the report is printed below; put back after, for a caller in the same process
    try:
        read(args.checkpoint, mmap=True)  # one line for a damaged, crafted or foreign file
        models, _cfg, _task = load_model_ensemble_and_task([args.checkpoint], arg_overrides=overrides)
    except OutlayersConfigError as e:
        return fail(str(e))
    except FileNotFoundError as e:
        return fail(f"cannot rebuild the model from '{args.checkpoint}': {e}; pass --data DIR with the "
                    "dictionaries used for training")
    finally:
        core.setLevel(level)
    report = parameter_report(models[0])
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.checkpoint}:")
        print(format_parameter_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
