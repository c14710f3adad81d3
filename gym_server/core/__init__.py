"""Infrastructure every layer may use: errors, settings, JSON text, extras, problem+json, ASGI helpers."""
