"""The outer adapters that call out over HTTP: the webhook sender (webhooks) and the rotation
runner (rotation) with its webhook target. Domain packages never import this package; the jobs
registry (runtime.jobs) starts its workers."""
