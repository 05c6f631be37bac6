"""Routers of the /v1 API: stateless planning, stateful jobs, operations."""
