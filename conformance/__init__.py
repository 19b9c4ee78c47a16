"""conformance is the shared test suite that drives every cvsm client through its driver.

``python -m conformance run`` starts the reference server on an embedded PostgreSQL, puts a
request-counting, fault-injecting proxy in front of it, seeds it through the public API and
runs every case in ``cases/`` against each language declared in ``drivers/``. See README.md.
"""
