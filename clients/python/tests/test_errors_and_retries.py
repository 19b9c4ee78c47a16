"""The error types and the backoff; an error answer without a JSON body is the conformance case
error_answer_without_json_body."""

from __future__ import annotations

import cvsm
from cvsm import _protocol


def test_backoff_is_full_jitter_doubling_from_100ms() -> None:
    # The autouse no_backoff fixture replaced the module attribute; the original is kept here.
    for attempt in range(4):
        delays = [_original_backoff(attempt) for _ in range(300)]
        assert all(0 <= d <= 0.1 * 2**attempt for d in delays)
        assert max(delays) > 0.05 * 2**attempt  # jitter spans the range, not a constant


_original_backoff = _protocol.backoff_delay


# Unreadable answers (R3), Retry-After (R4), redirects (R5), R9 and what an error carries
# (R11) are conformance cases.


def test_every_error_is_a_cvsm_error_with_every_field() -> None:
    for error in (
        cvsm.ConfigurationError("m"),
        cvsm.AuthenticationError("m", status=401),
        cvsm.PermissionDeniedError("m", status=403),
        cvsm.SecretNotFoundError("m"),
        cvsm.RateLimitError("m"),
        cvsm.ApiError("m", status=500),
        cvsm.NetworkError("m"),
    ):
        assert isinstance(error, cvsm.CvsmError)
        assert {"message", "status", "retry_after", "request_id", "suggestion"} <= set(dir(error))
