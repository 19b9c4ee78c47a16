# frozen_string_literal: true

# The error hierarchy of the SDK: one base class and one subclass per kind of failure.
# Callers branch on the class, never on the message text.
module Cvsm
  # The base of every error the SDK raises; rescue it, or branch on its subclasses. No error
  # message or field ever holds the token or a secret value.
  class Error < StandardError
    # @return [Integer, nil] the HTTP status of the answer the error came from, or nil without one
    attr_reader :status
    # @return [Integer, nil] seconds from a 429's +Retry-After+ header, or nil
    attr_reader :retry_after
    # @return [String, nil] the answer's +X-Request-Id+ header (for a name absent from a
    #   listing, the read by name's), or nil without an answer
    attr_reader :request_id
    # @return [String, nil] on a {Cvsm::SecretNotFoundError}, the existing name that differs only
    #   in case; otherwise nil
    attr_reader :suggestion

    # @param message [String, nil] what went wrong
    # @param status [Integer, nil] the HTTP status
    # @param retry_after [Integer, nil] seconds the server asked to wait
    # @param request_id [String, nil] the answer's request id
    # @param suggestion [String, nil] the name that differs only in case
    def initialize(message = nil, status: nil, retry_after: nil, request_id: nil, suggestion: nil)
      super(message)
      @status = status
      @retry_after = retry_after
      @request_id = request_id
      @suggestion = suggestion
    end
  end

  # The client cannot work with its settings: a missing or invalid
  # token, base URL, team or option; the server answering 404 to the listing or export request
  # (a base URL without /api/v1, a team id or slug that is none of the caller's teams) or 400 to
  # the read by name, listing or export request (an environment it rejects), with +status+ set;
  # or a secret that #inject cannot put in the environment.
  class ConfigurationError < Error; end

  # The server rejected the token (HTTP 401). The client's
  # cache, kept values included, is emptied when it is raised.
  class AuthenticationError < Error; end

  # The token may not make the request (HTTP 403): the user's
  # role, or a token scoped to another team or environment. It empties the cache too.
  class PermissionDeniedError < Error; end

  # The name is absent in the selected environment: the read by
  # name answered 404 (+status+ 404 and that answer's +request_id+) and the listing that followed
  # answered too, so the team and base URL are right (+suggestion+ names a listed secret that
  # differs only in case). It also means a name that is not a valid secret name (status nil; no
  # request is sent).
  class SecretNotFoundError < Error; end

  # The server answered HTTP 429; +retry_after+ is the number of seconds from its Retry-After
  # header, or nil when it sent none. It is never retried.
  class RateLimitError < Error
    # @param message [String, nil] what went wrong
    # @param status [Integer] the HTTP status, 429
    # @param fields [Hash] the other fields of {Cvsm::Error#initialize}
    def initialize(message = nil, status: 429, **fields)
      super(message, status: status, **fields)
    end
  end

  # Any other non-2xx answer, including a 3xx (redirects are never followed)
  # and 502/503/504 after the retries; +status+ is always set.
  class ApiError < Error; end

  # A value of an end-to-end team does not open with the team key: the envelope was altered or
  # is malformed, it was sealed for another secret, environment or team, its key version is not
  # the team key's even after fetching the key again, or the team key sent for the token does
  # not open with the token's key part. It is never retried and never answered with a kept
  # value; +status+ is nil. The message names the secret, never a value or a key.
  class DecryptionError < Error; end

  # No usable answer arrived after the retries: connection refused or
  # dropped, a timeout, a TLS failure, or a 2xx answer that is not the JSON the request promises.
  class NetworkError < Error; end
end
