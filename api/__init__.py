"""The HTTP API (FastAPI): schedules, pop groups, health and metrics."""
