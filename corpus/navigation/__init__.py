"""Navigation for agents: a file's outline (issue #32)."""
