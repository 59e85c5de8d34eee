"""DistilBERT's size and speed relative to its teacher (Sanh et al. 2019 report 40% fewer parameters and 60% faster
inference for a 6-layer student of BERT-base). Random weights; inference = the encoder forward pass (no heads), the
two models timed interleaved in one process. Run by hand; the figures go to the issue note.

    python -m benchmarks.distillation --threads 2 --batch 8 --seq 128
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from benchmarks.common import interleaved_timing, step_parser
from plm_lightning.checkpoint_format import CHECKPOINT_KEY
from plm_lightning.nn.stack_inputs import StackInputs
from plm_lightning.objectives import DistilBERT, MaskedLM


def main() -> None:
    parser = step_parser(["bert-base"])
    parser.add_argument("--teacher", default="bert-base")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    teacher = MaskedLM(backbone=args.teacher, vocab_size=30522)
    with tempfile.TemporaryDirectory() as tmp:
        from tokenizers import Tokenizer, models

        tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}, unk_token="[UNK]"))
        path = Path(tmp) / "teacher.ckpt"
        torch.save({"state_dict": teacher.state_dict(), "hyper_parameters": dict(teacher.hparams),
                    CHECKPOINT_KEY: {"objective": "MaskedLM", "backbone": teacher.config.to_dict(), "tokenizer": {
                        "json": tok.to_str(), "kind": "wordpiece",
                        "special": {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}}}},
                   path)
        student = DistilBERT(teacher=str(path))
    teacher.eval()
    student.eval()
    ids = torch.randint(5, 30522, (args.batch, args.seq))
    mask = torch.ones_like(ids)

    def forward(model: MaskedLM):  # noqa: ANN202
        def run() -> None:
            with torch.inference_mode():
                model.backbone(ids, StackInputs(attention_mask=mask))
        return run

    def count(model: torch.nn.Module) -> int:
        return sum(p.numel() for n, p in model.named_parameters() if not n.startswith("teacher."))

    timing = interleaved_timing({"teacher": forward(teacher), "student": forward(student)}, repeats=args.repeats)
    tokens = args.batch * args.seq
    result = {
        "teacher": {"backbone": args.teacher, "layers": teacher.config.num_layers, "parameters": count(teacher),
                    "tokens_per_s": tokens / timing["teacher"]["median"]},
        "student": {"layers": student.config.num_layers, "parameters": count(student),
                    "tokens_per_s": tokens / timing["student"]["median"]},
    }
    result["student_parameters_share"] = result["student"]["parameters"] / result["teacher"]["parameters"]
    result["student_speedup"] = 1 / timing["student"]["ratio_to_first"]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
