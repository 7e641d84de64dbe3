"""Evaluate decoding methods on a benchmark.

    python evaluate.py pair=tiny method=ar dataset=smoke
    python evaluate.py dataset=gsm8k methods=[ar,sd,static_ensemble,diversed] dataset.limit=10
    python evaluate.py -m pair=tiny method=static_ensemble method.w_draft=0,0.5,1
"""

from relaxspec.config import hydra_main


def _run(cfg):
    from relaxspec import evaluation

    return evaluation.run(cfg)


if __name__ == "__main__":
    hydra_main("evaluate", _run)
