"""Any MCP server as a gym tool environment: its tools are the episode's tools (see README.md)."""
