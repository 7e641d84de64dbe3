"""Train the DIVERSED weight head (REINFORCE + acceptance regulariser) on a DeepSpeed engine.

    python train.py +experiment=diversed_gsm8k_qwen25
    deepspeed --num_gpus 8 train.py +experiment=diversed_gsm8k_llama31
"""

from relaxspec.config import hydra_main


def _run(cfg):
    from relaxspec import training

    return training.run(cfg)


if __name__ == "__main__":
    hydra_main("train", _run)
