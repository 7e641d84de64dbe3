"""``python -m relaxspec.lm_eval <lm_eval arguments>``: lm-eval's CLI with the relaxspec model registered."""

from relaxspec.lm_eval import main

if __name__ == "__main__":
    main()
