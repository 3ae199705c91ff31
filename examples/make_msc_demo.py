"""Regenerate examples/msc-demo.jsonl from ParlAI MSC session-3 test data (../shared/data/msc/).

Three systems per item, chosen so that a sound judge has an obvious ordering:
* ``gold``: the speaker's real next turn from MSC;
* ``generic``: a bland reply that fits any context;
* ``mismatched``: the real turn of a *different* conversation (off-topic, persona-inconsistent).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dialogue_judge.datasets import msc_record_to_item, read_msc_lines

SOURCE = Path(__file__).resolve().parent.parent.parent / "shared/data/msc/msc_dialogue_session_3_test.txt"
N_ITEMS = 6


def main() -> None:
    records = list(read_msc_lines(SOURCE))[: N_ITEMS * 5 : 5]
    items = [msc_record_to_item(r, f"msc3-{i}") for i, r in enumerate(records)]
    for i, item in enumerate(items):
        other = items[(i + 3) % len(items)]
        item["candidates"] = {
            "gold": item["reference"],
            "generic": "That's interesting. Tell me more about it!",
            "mismatched": other["reference"],
        }
        item["dialogue"] = item["dialogue"][-8:]  # keep the demo prompts short for the small local judge
    out = Path(__file__).resolve().parent / "msc-demo.jsonl"
    out.write_text("".join(json.dumps(item) + "\n" for item in items))
    print(f"wrote {len(items)} items to {out}")


if __name__ == "__main__":
    main()
