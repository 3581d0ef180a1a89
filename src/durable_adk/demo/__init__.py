"""The worked examples behind ``durable-adk demo`` (scripted models, no network)."""
