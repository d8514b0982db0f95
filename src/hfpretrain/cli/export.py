"""Export a checkpoint to share it: bf16 weights (default), tokenizer, model card; optionally push it to the Hub.

    python scripts/export.py runs/my_run/final --out exports/my_model
    python scripts/export.py runs/my_run/final --out exports/my_model --push-to-hub user/my-model [--private]

The export loads with AutoModelForCausalLM.from_pretrained(DIR), transformers.pipeline and lm_eval --model hf.
--out must be new, empty or an earlier export of the same checkpoint (--force: write into it anyway). The export
carries no local paths (lineage.json and the card name folders, not where they are on this machine).
An export whose tokenizer llama.cpp's convert_hf_to_gguf.py does not know (one trained with train-tokenizer) gets
GGUF.md with the hash and pre-tokenizer name to register, and one line saying so (docs/eval.md, GGUF).
"""

from __future__ import annotations

import argparse
import sys

from hfpretrain.cli import error


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a save_pretrained folder (a run's final/ or a checkpoint-N)")
    p.add_argument("--out", required=True, help="the export folder")
    p.add_argument("--dtype", default="bfloat16", help="bfloat16 (default), float16 or float32")
    p.add_argument("--push-to-hub", metavar="REPO_ID", help="also upload to this Hub model repo (user/name)")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repo private")
    p.add_argument(
        "--force",
        action="store_true",
        help="write into --out even if it holds other files (those of the same names are replaced)",
    )
    p.add_argument(
        "--license",
        default=None,
        metavar="ID",
        help="the model card's license, a Hub license id such as apache-2.0 or mit (default: unknown)",
    )
    p.add_argument(
        "--dataset",
        action="append",
        default=None,
        metavar="HUB_ID",
        dest="datasets",
        help="a Hub dataset the model was trained on, for the card's header (repeat for several; default: "
        "the Hub inputs the data's manifests name)",
    )
    args = p.parse_args(argv)
    from hfpretrain.eval.export import ExportWriteError, PushError, export_checkpoint

    try:
        out = export_checkpoint(
            args.checkpoint,
            args.out,
            args.dtype,
            args.push_to_hub,
            args.private,
            force=args.force,
            license=args.license,
            datasets=args.datasets,
            say=lambda line: print(line, file=sys.stderr),
        )
    except (FileNotFoundError, ValueError) as err:
        return error(err)
    except (PushError, ExportWriteError) as err:
        return error(err, 1)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
