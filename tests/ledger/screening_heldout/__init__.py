"""The held-out screening corpus: measured against, never tuned on (docs/screening.md says how it was made)."""
