"""HTTP API: one router per resource, problem+json errors, dependencies."""
