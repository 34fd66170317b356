"""The project phase: the index of a project's local modules and their summaries across modules."""
