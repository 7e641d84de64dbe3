"""Reference-free fidelity of a method's output to the target model (METHODS-VARIANTS §9.4, item 3).

* `rouge_l(candidate, reference)`: ROUGE-L F-measure (the `rouge_score` package, stemming on), e.g. of a lossy
  method's answer against the target's own greedy answer.
* `target_nll(model, prompt_ids, answer_ids)`: the target's mean per-token negative log-likelihood (nats) of a
  generated answer given the prompt, in one teacher-forced forward pass. It takes token-id tensors, not strings,
  so it is independent of any tokenizer and must be given ids in the target's vocabulary.

The evaluation harness computes both for every record when `dataset.fidelity: true` (MT-Bench), see
`relaxspec.evaluation.run.Harness.add_fidelity`.

Not covered: BLEU, batching several answers into one pass, KV-cache reuse from generation.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

__all__ = ["rouge_l", "target_nll"]


@lru_cache(maxsize=1)
def _scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F-measure in [0, 1] (1 for identical texts; 0 when either side has no word tokens)."""
    return float(_scorer().score(reference, candidate)["rougeL"].fmeasure)


def target_nll(model: Any, prompt_ids: Any, answer_ids: Any) -> float:
    """Mean negative log-likelihood per answer token under `model`, by teacher forcing.

    Args:
        model: A Hugging Face causal LM (anything whose `model(input_ids=...)` returns `.logits` [1, T, V]).
        prompt_ids (Tensor[P] or Tensor[1, P]): Prompt token ids (the rendered chat prompt), P >= 1.
        answer_ids (Tensor[A] or Tensor[1, A]): Generated answer token ids.

    Returns:
        Mean NLL in nats over the A answer tokens (nan when A == 0).
    """
    import torch

    p = torch.as_tensor(prompt_ids).reshape(-1).long()
    a = torch.as_tensor(answer_ids).reshape(-1).long()
    if a.numel() == 0:
        return float("nan")
    if p.numel() == 0:
        raise ValueError("target_nll needs at least one prompt token (e.g. BOS) to predict the first answer token")
    try:
        device = next(iter(model.parameters())).device
    except (AttributeError, StopIteration):
        device = p.device
    ids = torch.cat([p, a]).unsqueeze(0).to(device)
    keep = a.numel() + 1  # logits of the last prompt position and of every answer position (a 152k vocabulary)
    with torch.no_grad():
        try:
            logits = model(input_ids=ids, logits_to_keep=keep).logits
        except TypeError:  # a model without `logits_to_keep`
            logits = model(input_ids=ids).logits
    logits = logits[0, -keep:-1].float()  # position t predicts token t + 1
    return float(torch.nn.functional.cross_entropy(logits, a.to(logits.device), reduction="mean"))
