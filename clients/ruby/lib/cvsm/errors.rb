# frozen_string_literal: true

# The error hierarchy of the SDK: one base class and one subclass per kind of failure.
# Callers branch on the class, never on the message text.
module Cvsm
  # Cvsm::Error is the base of every error the SDK raises. Every error carries the same fields:
  #
  # +status+::      the HTTP status of the answer the error came from, or nil without one
  # +retry_after+:: seconds from a 429's Retry-After header, or nil
  # +request_id+::  the answer's X-Request-Id header (for a name absent from a listing, the
  #                 listing's), or nil without an answer
  # +suggestion+::  on Cvsm::SecretNotFoundError, the existing name that differs only in case;
  #                 otherwise nil
  #
  # No error message or field ever holds the token or a secret value.
  class Error < StandardError
    attr_reader :status, :retry_after, :request_id, :suggestion

    def initialize(message = nil, status: nil, retry_after: nil, request_id: nil, suggestion: nil)
      super(message)
      @status = status
      @retry_after = retry_after
      @request_id = request_id
      @suggestion = suggestion
    end
  end

  # Cvsm::ConfigurationError means the client cannot work with its settings: a missing or invalid
  # token, base URL, team or option; a team slug that matches none of the caller's teams; the
  # server answering 404 to the teams, listing or export request (a base URL without /api/v1, an
  # unknown team id) or 400 to the listing or export request (an environment it rejects), with
  # +status+ set; or a secret that #inject cannot put in the environment.
  class ConfigurationError < Error; end

  # Cvsm::AuthenticationError means the server rejected the token (HTTP 401). The client's
  # cache is emptied when it is raised.
  class AuthenticationError < Error; end

  # Cvsm::PermissionDeniedError means the token's user lacks the role for the request (HTTP 403).
  class PermissionDeniedError < Error; end

  # Cvsm::SecretNotFoundError means the name is absent in the selected environment (status nil;
  # +suggestion+ names a secret that differs only in case), the name is not a valid secret name
  # (no request is sent), or the value request answered HTTP 404.
  class SecretNotFoundError < Error; end

  # Cvsm::RateLimitError means the server answered HTTP 429; +retry_after+ is the number of
  # seconds from its Retry-After header, or nil when it sent none. It is never retried.
  class RateLimitError < Error
    def initialize(message = nil, status: 429, **fields)
      super(message, status: status, **fields)
    end
  end

  # Cvsm::ApiError is any other non-2xx answer, including a 3xx (redirects are never followed)
  # and 502/503/504 after the retries; +status+ is always set.
  class ApiError < Error; end

  # Cvsm::NetworkError means no usable answer arrived after the retries: connection refused or
  # dropped, a timeout, a TLS failure, or a 2xx answer that is not the JSON the request promises.
  class NetworkError < Error; end
end
