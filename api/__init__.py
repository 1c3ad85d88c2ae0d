"""The HTTP API: thin FastAPI routes over ``core``'s services and repositories."""
