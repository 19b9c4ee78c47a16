"""End-to-end encrypted teams on the server's side: what clients seal, members' keys and team-key
wraps."""
