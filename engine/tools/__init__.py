"""Measurement tools: the decode-step benchmark and the churn (soak) test."""
