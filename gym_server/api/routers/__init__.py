"""One router per resource; `create_app` includes them all."""
