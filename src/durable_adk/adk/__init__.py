"""The ADK layer: the only package of durable-adk that imports google.adk."""
