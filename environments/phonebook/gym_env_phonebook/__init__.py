"""The phonebook environment: look a person's extension up, then dial it (the multi-turn learning proof)."""
