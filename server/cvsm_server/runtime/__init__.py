"""The process: the app factory, the cvsm-server command, worker processes, background jobs,
graceful stop, TLS, the event loop, systemd notify and the operator's database commands."""
