"""The shared kernel every feature package uses: who acts (actor), domain errors, input rules,
settings, timestamps, the client IP and rate limits."""
