"""The service's brain: jobs, statistics windows, triggers, the adaptation loop, plan lifecycle, persistence."""
