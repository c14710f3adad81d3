"""The `inbox` environment: answer questions from a generated mailbox, citing message ids (ART·E-style)."""
