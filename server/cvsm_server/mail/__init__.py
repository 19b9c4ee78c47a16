"""Mail: queued messages (messages), the background sender (sender), the local outbox reader
(outbox), tokens sent by mail (tokens) and the newsletter."""
