"""Features over stored scores: verifier audits and re-scoring with the current verifier."""
