"""The FastAPI application: routes, request/response schemas, auth, error mapping — thin."""
