"""Re-export of the product's lexical analysis for the tuning harness (one definition only)."""

from daemon.embedder import lexical_text  # noqa: F401
