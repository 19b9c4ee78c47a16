"""Webhooks: a team's endpoints (service), the outbox written with each audit entry (events) and the background sender (sender)."""
