"""The account memory ledger."""
