"""Python HTTP client and the PySpark integration. Never imports api/ or controller/."""
