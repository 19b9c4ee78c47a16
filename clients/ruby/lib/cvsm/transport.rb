# frozen_string_literal: true

require "json"
require "net/http"
require "openssl"
require "time"
require "timeout"
require "uri"
require "zlib"

# HTTP for the SDK: headers, per-attempt timeouts, retries with jittered backoff, and the
# mapping from HTTP statuses and network failures to Cvsm errors.
module Cvsm
  # Cvsm::Transport performs authenticated GET requests against the API and returns parsed
  # JSON. It retries network errors and 502/503/504 up to +max_retries+ times, sleeping a random
  # time between 0 and 0.1 * 2**attempt seconds before each retry; it never retries a 4xx.
  class Transport
    RETRYABLE_STATUSES = [502, 503, 504].freeze
    MAX_DETAIL_LENGTH = 300

    # Raised inside an attempt when its overall deadline passes.
    class AttemptTimeout < StandardError; end
    private_constant :AttemptTimeout

    NETWORK_ERRORS = [
      AttemptTimeout, Timeout::Error, SocketError, SystemCallError, IOError, EOFError,
      Net::HTTPBadResponse, Net::ProtocolError, OpenSSL::SSL::SSLError, Zlib::Error
    ].freeze
    private_constant :NETWORK_ERRORS

    # Cvsm::Transport.new takes the client's Configuration; +sleeper+ and +random+ exist so
    # tests can observe the backoff.
    def initialize(config, sleeper: ->(seconds) { sleep(seconds) }, random: Random.new)
      @config = config
      @sleeper = sleeper
      @random = random
    end

    # Cvsm::Transport#get_json sends GET +path+ (relative to the base URL) with +query+ and
    # returns the parsed JSON body of a 2xx answer, or raises the matching Cvsm::Error.
    def get_json(path, query = nil)
      uri = URI("#{@config.base_url}#{path}")
      uri.query = URI.encode_www_form(query) if query && !query.empty?
      attempt = 0
      loop do
        outcome = attempt_once(uri, path)
        return outcome[1] if outcome[0] == :ok
        raise outcome[1] if outcome[0] == :fatal || attempt >= @config.max_retries

        @sleeper.call(backoff(attempt))
        attempt += 1
      end
    end

    # Cvsm::Transport#backoff is the random delay before retry number +attempt+ (from 0).
    def backoff(attempt)
      @random.rand * 0.1 * (2**attempt)
    end

    # Cvsm::Transport#inspect never shows the token.
    def inspect
      "#<#{self.class.name} timeout=#{@config.timeout} max_retries=#{@config.max_retries}>"
    end
    alias to_s inspect

    private

    # One attempt: [:ok, body], [:retry, error] (retryable) or [:fatal, error].
    def attempt_once(uri, path)
      response = Timeout.timeout(@config.timeout, AttemptTimeout) { perform(uri) }
      status = response.code.to_i
      if (200..299).cover?(status)
        parse_success(response, path)
      elsif RETRYABLE_STATUSES.include?(status)
        [:retry, error_for(response)]
      else
        [:fatal, error_for(response)]
      end
    rescue *NETWORK_ERRORS => e
      [:retry, NetworkError.new(redact("GET #{path} failed: #{describe_exception(e)}"))]
    end

    def perform(uri)
      http = Net::HTTP.new(uri.host, uri.port)
      http.use_ssl = uri.scheme == "https"
      http.open_timeout = @config.timeout
      http.read_timeout = @config.timeout
      http.write_timeout = @config.timeout
      http.max_retries = 0 # retries are ours alone, so every attempt is counted
      request = Net::HTTP::Get.new(uri)
      request["Authorization"] = "Bearer #{@config.token}"
      request["Accept"] = "application/json"
      request["User-Agent"] = USER_AGENT
      http.start { |connection| connection.request(request) }
    end

    def parse_success(response, path)
      [:ok, JSON.parse(response.body.to_s)]
    rescue JSON::ParserError
      [:retry, NetworkError.new("GET #{path} failed: unreadable response (HTTP #{response.code})")]
    end

    def describe_exception(error)
      return "timed out after #{@config.timeout}s" if error.is_a?(AttemptTimeout)

      "#{error.message} (#{error.class})"
    end

    def error_for(response)
      status = response.code.to_i
      detail = server_message(response.body)
      message = redact(detail ? "HTTP #{status}: #{detail}" : "HTTP #{status} #{response.message}".rstrip)
      case status
      when 401 then AuthenticationError.new(message, status: status)
      when 403 then PermissionDeniedError.new(message, status: status)
      when 404 then SecretNotFoundError.new(message, status: status)
      when 429
        RateLimitError.new(message, status: status, retry_after: retry_after(response["Retry-After"]))
      else ApiError.new(message, status: status)
      end
    end

    # The server's {"error": "..."} text, shortened, or nil when the body has none.
    def server_message(body)
      parsed = JSON.parse(body.to_s)
      text = parsed["error"] if parsed.is_a?(Hash)
      return nil unless text.is_a?(String) && !text.empty?

      text.length > MAX_DETAIL_LENGTH ? "#{text[0, MAX_DETAIL_LENGTH]}..." : text
    rescue JSON::ParserError
      nil
    end

    # Whole seconds from a Retry-After header (delta-seconds or HTTP date), or nil.
    def retry_after(header)
      return nil if header.nil?

      value = header.strip
      return Integer(value, 10) if value.match?(/\A\d+\z/)

      [(Time.httpdate(value) - Time.now).ceil, 0].max
    rescue ArgumentError
      nil
    end

    # Removes the token from text that may have come from the server or the network stack.
    def redact(text)
      token = @config.token
      text = text.dup.force_encoding(Encoding::UTF_8).scrub
      token.nil? || token.empty? ? text : text.gsub(token, "[REDACTED]")
    end
  end
end
