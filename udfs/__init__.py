"""Python functions usable inside incremental views (Arrow-vectorized UDFs). Not yet populated."""
