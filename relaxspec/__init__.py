"""relaxspec: relaxed speculative decoding (DIVERSED and peers) on Hugging Face causal LMs."""

__version__ = "0.1.0"
