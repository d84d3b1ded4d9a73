#!/usr/bin/env python3
"""Builds a small offline lm-eval multiple-choice task from data/text/heldout.txt.

    python3 bench/lm_eval/make_task.py OUT_DIR [--items 50] [--seed 1234]

Each item is a passage of up to three consecutive sentences and four candidate next sentences: the
one that really follows in the text and three sentences of similar length drawn from other
paragraphs. lm-eval scores each candidate's log-likelihood after the passage (acc) and the same per
character (acc_norm). Chance is 25%. Writes OUT_DIR/heldout_next_sentence.jsonl and
OUT_DIR/heldout_next_sentence.yaml (a task whose dataset_path is `json` with data_files pointing at
the JSONL, so nothing is fetched from a hub). Standard library only; deterministic for a seed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = ROOT / "data" / "text" / "heldout.txt"
TASK = "lowbit_heldout_next_sentence"
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def sentences_of(paragraph: str) -> list[str]:
    text = " ".join(paragraph.split())
    return [s for s in SENTENCE_END.split(text) if s]


def usable(sentence: str) -> bool:
    words = len(sentence.split())
    return 6 <= words <= 40 and sentence.isascii()


def build(items: int, seed: int) -> list[dict]:
    paragraphs = [sentences_of(p) for p in HELDOUT.read_text(encoding="utf-8").split("\n\n")]
    pool = [(pi, s) for pi, p in enumerate(paragraphs) for s in p if usable(s)]
    candidates = [(pi, k) for pi, p in enumerate(paragraphs) for k in range(1, len(p))
                  if usable(p[k]) and all(usable(s) for s in p[max(0, k - 3):k])]
    rng = random.Random(seed)
    rng.shuffle(candidates)
    out = []
    used_paragraphs = set()
    for pi, k in candidates:
        if pi in used_paragraphs:
            continue
        target = paragraphs[pi][k]
        length = len(target.split())
        similar = [s for qi, s in pool if qi != pi and abs(len(s.split()) - length) <= max(2, length // 4)]
        if len(similar) < 3:
            continue
        choices = rng.sample(similar, 3) + [target]
        rng.shuffle(choices)
        out.append({"context": " ".join(paragraphs[pi][max(0, k - 3):k]), "choices": choices,
                    "label": choices.index(target)})
        used_paragraphs.add(pi)
        if len(out) == items:
            return out
    raise SystemExit(f"only {len(out)} items could be built")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--items", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    data = args.out_dir.resolve() / "heldout_next_sentence.jsonl"
    with data.open("w", encoding="utf-8") as f:
        for item in build(args.items, args.seed):
            f.write(json.dumps(item) + "\n")
    # JSON is valid YAML for the scalars used here, which keeps quoting of the path safe.
    (args.out_dir / "heldout_next_sentence.yaml").write_text(f"""task: {TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {json.dumps(str(data))}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
target_delimiter: " "
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
""")
    print(data)


if __name__ == "__main__":
    main()
