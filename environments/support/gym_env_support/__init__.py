"""The `support` environment: a customer-support agent with a written policy and a simulated user."""
