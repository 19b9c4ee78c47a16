"""The HTTP layer: request parsing, middleware, handlers and the one route table.

Handlers parse the request, call a domain function with the request's `Actor` and a connection,
and shape the answer. Nothing below this package holds SQL or writes audit rows.
"""
