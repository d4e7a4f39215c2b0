"""The audit log: what operators did through the console, who, when, and how it ended."""
