# frozen_string_literal: true

# The error hierarchy of the SDK: one base class and one subclass per kind of failure.
# Callers branch on the class, never on the message text.
module Cvsm
  # Cvsm::Error is the base of every error the SDK raises; +status+ is the HTTP status when
  # the error came from a response, otherwise nil.
  class Error < StandardError
    attr_reader :status

    def initialize(message = nil, status: nil)
      super(message)
      @status = status
    end
  end

  # Cvsm::ConfigurationError means the client cannot work with its settings: a missing token,
  # base URL or team, an invalid option, or a team slug that matches none of the caller's teams.
  class ConfigurationError < Error; end

  # Cvsm::AuthenticationError means the server rejected the token (HTTP 401). The client's
  # cache is emptied when it is raised.
  class AuthenticationError < Error; end

  # Cvsm::PermissionDeniedError means the token's user lacks the role for the request (HTTP 403).
  class PermissionDeniedError < Error; end

  # Cvsm::SecretNotFoundError means the name is absent in the selected environment (status nil;
  # the message may suggest a name that differs only in case) or the server answered HTTP 404.
  class SecretNotFoundError < Error; end

  # Cvsm::RateLimitError means the server answered HTTP 429; +retry_after+ is the number of
  # seconds from its Retry-After header, or nil when it sent none. It is never retried.
  class RateLimitError < Error
    attr_reader :retry_after

    def initialize(message = nil, status: 429, retry_after: nil)
      super(message, status: status)
      @retry_after = retry_after
    end
  end

  # Cvsm::ApiError is any other non-2xx answer, including 502/503/504 after the retries;
  # +status+ is always set.
  class ApiError < Error; end

  # Cvsm::NetworkError means no usable answer arrived after the retries: connection refused or
  # dropped, a timeout, or a response that could not be read.
  class NetworkError < Error; end
end
