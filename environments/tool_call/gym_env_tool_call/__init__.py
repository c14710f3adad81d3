"""The `tool_call` environment: one request, one turn, the right tool call."""
