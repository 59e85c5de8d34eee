"""Data-size study (issue 7): the same tiny GPT-2 pretrained on budgets of N training tokens (default 0.1M, 1M and
10M tokens read from one fixed synthetic world), each with its own full learning-rate schedule, then compared by the
probes on frozen representations. Run by hand; the figures go to the issue note.

Per budget it reports LAMA P@1 per layer by the model's own head (logit lens), and for one relation (default P19,
the birthplace) the held-out accuracy of a linear probe on each layer's hidden state at the subject's last token and
its online code compression (Voita & Titov 2020, MDL probing, sec. 3.2). This is the comparison of Zhang et al. 2021
("When Do You Need Billions of Words of Pretraining Data?"), who probe MiniBERTas pretrained on 1M-1B words with
classifier and MDL probes; here the corpus is fixed and the budget counts the (non-padding) tokens the model reads,
so a budget above the corpus size means several epochs.

    python -m benchmarks.data_size --out /tmp/data-size                       # 0.1M, 1M, 10M tokens (CPU: ~1 h)
    python -m benchmarks.data_size --budgets 1e8 --out runs/data-size-100m    # 100M tokens: ~8 h on 2 CPU cores

A killed run resumes: rerun the same command and each unfinished budget continues from its last checkpoint (written
every ``--save-every`` steps); ``train_seconds`` adds up the pieces.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from plm_lightning.corpus.world import world_from_spec
from plm_lightning.data import CausalLMDataModule
from plm_lightning.knowledge import representations as rep
from plm_lightning.knowledge.lm import LanguageModel
from plm_lightning.knowledge.probing import probe

CONFIG = "configs/knowledge/gpt2-world.yaml"


def tokens_per_row(config: dict, world: str) -> tuple[float, int]:
    """Mean non-padding tokens of one training row of the recipe's data on ``world``, and the corpus's tokens."""
    args = {**config["data"]["init_args"], "source": world}
    data = CausalLMDataModule(**args)
    data.setup("fit")
    real = int((data.blocks["train"].document_ids >= 0).sum())
    return real / len(data.blocks["train"].document_ids), real


def pretrain(config: dict, budget: float, steps: int, world: str, batch: int, out: Path, save_every: int) -> Path:
    """Trains the recipe for ``steps`` on ``world`` (its own schedule) unless done, resuming from the budget's last
    checkpoint when an earlier run of it was killed: a checkpoint is written every ``save_every`` steps, so the
    100M-token budget (hours on a CPU) can be run in pieces."""
    root = out / f"tokens-{budget:.0e}"
    if (root / "done.json").exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(config)
    config["data"]["init_args"].update(source=world, batch_size=batch)
    trainer = config["trainer"]
    trainer.update(max_steps=steps, default_root_dir=str(root))
    trainer["logger"]["init_args"]["save_dir"] = str(root)
    for callback in trainer["callbacks"]:
        if callback["class_path"].endswith("ModelCheckpoint"):
            callback["init_args"].update(dirpath=str(root / "checkpoints"), every_n_train_steps=min(steps, save_every),
                                         save_top_k=1, filename="latest")
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "plm_lightning", "fit", "--config", str(root / "config.yaml")]
    last = root / "checkpoints" / "last.ckpt"
    if last.exists():
        command += ["--ckpt_path", str(last)]
    spent = json.loads((root / "seconds.json").read_text())["seconds"] if (root / "seconds.json").exists() else 0.0
    start = time.perf_counter()
    with open(root / "fit.log", "a") as log, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT) as run:
        try:
            run.wait()
        finally:  # killed (SIGTERM, Ctrl-C): stop the run too and keep the time it spent, so a rerun adds to it
            if run.poll() is None:
                run.terminate()
                run.wait()
            spent += time.perf_counter() - start
            (root / "seconds.json").write_text(json.dumps({"seconds": spent}))
    if run.returncode != 0:
        raise SystemExit(f"pretraining the {budget:.0e}-token budget failed (exit {run.returncode}): see {root / 'fit.log'}"
                         " (run the same command again to resume from its last checkpoint)")
    (root / "done.json").write_text(json.dumps({"seconds": spent, "steps": steps}))
    return root


def probe_model(checkpoint: Path, world: str, relation: str) -> dict:
    lm = LanguageModel.load(checkpoint)
    w = world_from_spec(world)
    lama = probe(lm, w.probes("train", "canonical"))
    queries, positions, labels, classes = rep.world_property(lm, w, relation)
    features = rep.layer_features(lm, queries, positions)
    accuracy = rep.classifier_probe(features, labels)
    mdl = [rep.online_code_length(f, labels, classes) for f in features]
    return {"lama_p@1": [round(x["p@1"], 3) for x in lama.layers],
            "probe_accuracy": [round(a, 3) for a in accuracy],
            "compression": [round(m["compression"], 2) for m in mdl],
            "online_bits": [round(m["online_bits"], 1) for m in mdl],
            "examples": len(labels), "classes": classes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", default="world:seed=0,subjects=1000")
    parser.add_argument("--budgets", type=float, nargs="+", default=[1e5, 1e6, 1e7], help="training tokens")
    parser.add_argument("--relation", default="P19")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("runs/data-size"))
    parser.add_argument("--save-every", type=int, default=2000, help="steps between the checkpoints a rerun resumes from")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout`/`kill`: unwind, so the fit run stops as well
    config = yaml.safe_load(Path(CONFIG).read_text())
    per_row, corpus = tokens_per_row(config, args.world)
    per_step = per_row * args.batch
    print(json.dumps({"world": args.world, "corpus_tokens": corpus, "tokens_per_step": round(per_step, 1)}), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for budget in args.budgets:
        steps = max(1, math.ceil(budget / per_step))
        root = pretrain(config, budget, steps, args.world, args.batch, args.out, args.save_every)
        seconds = json.loads((root / "done.json").read_text())["seconds"]
        checkpoint = root / "checkpoints" / "last.ckpt"
        rows.append({"budget_tokens": budget, "steps": steps, "epochs": round(steps * per_step / corpus, 2),
                     "train_seconds": round(seconds), "tokens_per_s": round(steps * per_step / seconds),
                     **probe_model(checkpoint, args.world, args.relation)})
        print(json.dumps(rows[-1]), flush=True)
    (args.out / "data_size.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
