"""An invoicing agent served over A2A with durable tasks (docs/a2a.md)."""
