# frozen_string_literal: true

require "json"
require "net/http"
require "openssl"
require "time"
require "timeout"
require "uri"
require "zlib"

# HTTP for the SDK: headers, a deadline per attempt, retries with jittered backoff, and the
# mapping from HTTP statuses, network failures and unreadable answers to Cvsm errors.
module Cvsm
  # Performs authenticated GET requests against the API and returns parsed
  # JSON. It retries network errors, unreadable 2xx answers and 502/503/504 up to +max_retries+
  # times, sleeping a random time between 0 and 0.1 * 2**attempt seconds before each retry; it
  # never retries a 4xx and never follows a redirect. Used by Cvsm::Client.
  # @api private
  class Transport
    include Redaction::Settings

    # The statuses retried like a network error.
    RETRYABLE_STATUSES = Rules::RETRYABLE_STATUSES
    # The most characters of a server's error text an error message quotes.
    MAX_DETAIL_LENGTH = Rules::MAX_SERVER_MESSAGE

    # A 2xx answer: its parsed JSON, its X-Request-Id header and whether it carries
    # +Cvsm-E2E: 1+ (the JSON export of an end-to-end team).
    Reply = Struct.new(:data, :request_id, :end_to_end)

    # What a 2xx answer must look like: +description+ (for the error message) and +test+, a
    # callable that accepts the parsed JSON or not.
    Shape = Struct.new(:description, :test) do
      # @param data [Object] the parsed JSON
      # @return [Boolean] whether the answer has this shape
      def accepts?(data) = test.call(data)
    end

    # Raised inside an attempt when its deadline passes.
    class AttemptTimeout < StandardError; end
    private_constant :AttemptTimeout

    NETWORK_ERRORS = [
      AttemptTimeout, Timeout::Error, SocketError, SystemCallError, IOError,
      Net::HTTPBadResponse, Net::ProtocolError, OpenSSL::OpenSSLError, Zlib::Error
    ].freeze
    private_constant :NETWORK_ERRORS

    # Bounds one attempt, from connecting to the last byte of the body, by a deadline (R1).
    #
    # Net::HTTP's read_timeout applies to each read, so a server that drips its answer a byte at
    # a time never trips it. Timeout.timeout is not used either: it raises into the thread at any
    # point, inside Net::HTTP's or OpenSSL's own cleanup included. Instead a watchdog thread waits
    # for the deadline and then closes the connection (Net::HTTP#finish); the read blocked on it
    # fails with an IOError at a well-defined point, which the attempt reports as a timeout.
    # Connecting (TCP, proxy CONNECT, TLS handshake) is bounded by Net::HTTP's open, read and
    # write timeouts set to the time left, and the deadline is checked again once connected.
    class Deadline
      def initialize(seconds)
        @at = now + seconds
        @mutex = Mutex.new
        @stopped_signal = ConditionVariable.new
        @stopped = false
        @fired = false
        @watchdog = nil
      end

      # Seconds left; raises AttemptTimeout when none are.
      def remaining
        left = @at - now
        raise AttemptTimeout if left <= 0

        left
      end

      # Whether the watchdog closed the connection.
      def fired?
        @mutex.synchronize { @fired }
      end

      # Closes +http+'s connection at the deadline unless #stop comes first.
      def watch(http)
        @watchdog = Thread.new do
          Thread.current.name = "cvsm-deadline"
          http.finish if expire?
        rescue StandardError
          nil # the attempt ended on its own at the same moment
        end
      end

      # Ends the watch; when this returns, the watchdog has closed nothing or finished closing.
      def stop
        @mutex.synchronize do
          @stopped = true
          @stopped_signal.signal
        end
        @watchdog&.join
      end

      private

      def expire?
        @mutex.synchronize do
          until @stopped || (left = @at - now) <= 0
            @stopped_signal.wait(@mutex, left)
          end
          @fired = !@stopped
        end
      end

      def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
    private_constant :Deadline

    # Takes the client's Configuration; +sleeper+ and +random+ exist so that tests can observe
    # the backoff.
    def initialize(config, sleeper: ->(seconds) { sleep(seconds) }, random: Random.new)
      @config = config
      @sleeper = sleeper
      @random = random
    end

    # Sends GET +path+ (relative to the base URL) with +query+ and returns a Reply for a 2xx answer whose JSON +shape+ accepts. An answer that is not JSON or
    # not of that shape is retried like a dropped connection, then is a Cvsm::NetworkError.
    # +misconfigured+ maps statuses that mean a wrong base URL, team or environment to a hint:
    # those raise Cvsm::ConfigurationError. Any other failure raises the matching Cvsm::Error.
    def get_json(path, query = nil, shape: nil, misconfigured: {})
      uri = URI("#{@config.api_root}#{path}")
      uri.query = URI.encode_www_form(query) if query && !query.empty?
      attempt = 0
      loop do
        outcome, result = attempt_once(uri, path, shape, misconfigured)
        return result if outcome == :ok
        raise result if outcome == :fatal || attempt >= @config.max_retries

        @sleeper.call(backoff(attempt))
        attempt += 1
      end
    end

    # the random delay before retry number +attempt+ (from 0).
    def backoff(attempt)
      @random.rand * (Rules::RETRY_BACKOFF_BASE_MS / 1000.0) * (2**attempt)
    end

    # Sends GET +path+ with +query+ as a long-lived stream (the change stream, R16) and yields
    # the Net::HTTPResponse, whatever its status, with its body not read yet; returns what the
    # block returns. +headers+ are added to (and override) the usual ones. Connecting is bounded
    # by +timeout+; each read of the body by +read_timeout+ seconds (no byte for that long is a
    # Net::ReadTimeout), never by an attempt's deadline. Before connecting, +started+ is called
    # with the Net::HTTP, so that another thread can end the stream with Net::HTTP#finish. There
    # is no retry: the caller decides when to connect again. Network failures propagate as they
    # are (Net::HTTP's, OpenSSL's or the system's errors).
    def stream(path, query, headers, read_timeout:, started:)
      uri = URI("#{@config.api_root}#{path}")
      uri.query = URI.encode_www_form(query) if query && !query.empty?
      http = prepare(@config.new_http(uri), uri, @config.timeout)
      http.read_timeout = read_timeout
      started.call(http)
      http.start do |connection|
        request = build_request(uri)
        headers.each { |name, value| request[name] = value }
        connection.request(request) { |response| return yield(response) }
      end
    end

    # Whole seconds from a Retry-After header (R4): delta-seconds as they are; an HTTP date as
    # the seconds from now until then, rounded up, 0 when it is past; nil for anything else.
    def retry_after(header)
      return nil if header.nil?

      value = header.strip
      return Integer(value, 10) if value.match?(/\A\d+\z/)

      [(Time.httpdate(value) - Time.now).ceil, 0].max
    rescue ArgumentError
      nil
    end

    private

    def shown_settings = { timeout: @config.timeout, max_retries: @config.max_retries }
    def marshal_refusal = "#{self.class.name} cannot be marshalled (it holds a token)"

    # One attempt: [:ok, reply], [:retry, error] (retryable) or [:fatal, error].
    def attempt_once(uri, path, shape, misconfigured)
      response = fetch(uri)
      status = response.code.to_i
      if (200..299).cover?(status)
        read_success(response, path, shape)
      elsif RETRYABLE_STATUSES.include?(status)
        [:retry, error_for(response, misconfigured)]
      else
        [:fatal, error_for(response, misconfigured)]
      end
    rescue *NETWORK_ERRORS => e
      [:retry, NetworkError.new(redact("GET #{path} failed: #{describe_exception(e)}"))]
    end

    # Sends the request and reads the whole answer before the attempt's deadline.
    def fetch(uri)
      deadline = Deadline.new(@config.timeout)
      http = prepare(@config.new_http(uri), uri, deadline.remaining)
      http.start do |connection|
        deadline.watch(connection)
        left = deadline.remaining
        connection.read_timeout = left
        connection.write_timeout = left
        connection.request(build_request(uri))
      end
    rescue *NETWORK_ERRORS
      raise AttemptTimeout if deadline&.fired?

      raise
    ensure
      deadline&.stop
    end

    # Applies what the SDK always decides to the Net::HTTP for +uri+: TLS by scheme, the private
    # CA when one is configured, the timeouts, and no retries or redirects of Net::HTTP's own.
    def prepare(http, uri, seconds)
      http.use_ssl = uri.scheme == "https"
      if @config.cert_store
        http.ca_file = nil
        http.ca_path = nil
        http.cert_store = @config.cert_store
        http.verify_mode = OpenSSL::SSL::VERIFY_PEER
      end
      http.open_timeout = seconds
      http.read_timeout = seconds # also bounds a proxy's answer to CONNECT
      http.write_timeout = seconds
      http.max_retries = 0 # retries are ours alone, so every attempt is counted
      http
    end

    def build_request(uri)
      request = Net::HTTP::Get.new(uri)
      request["Authorization"] = "Bearer #{@config.token}"
      request["Accept"] = Rules::ACCEPT_JSON
      request["User-Agent"] = USER_AGENT
      request
    end

    def read_success(response, path, shape)
      request_id = response[Rules::HEADER_REQUEST_ID]
      data = JSON.parse(response.body.to_s)
      end_to_end = response[Rules::HEADER_E2E]&.strip == "1"
      return [:ok, Reply.new(data, request_id, end_to_end)] if shape.nil? || shape.accepts?(data)

      [:retry, unreadable(response, path, "not #{shape.description}", request_id)]
    rescue JSON::ParserError, EncodingError
      [:retry, unreadable(response, path, "not JSON", request_id)]
    end

    def unreadable(response, path, reason, request_id)
      NetworkError.new("GET #{path} failed: unreadable response (HTTP #{response.code}: #{reason})",
                       request_id: request_id)
    end

    def describe_exception(error)
      return "timed out after #{@config.timeout}s" if error.is_a?(AttemptTimeout)

      "#{error.message} (#{error.class})"
    end

    def error_for(response, misconfigured)
      status = response.code.to_i
      detail = server_message(response.body)
      message = redact(detail ? "HTTP #{status}: #{detail}" : "HTTP #{status} #{response.message}".rstrip)
      fields = { status: status, request_id: response[Rules::HEADER_REQUEST_ID] }
      hint = misconfigured[status]
      return ConfigurationError.new("#{message}; #{hint}", **fields) if hint

      case status
      when 300..399 then ApiError.new("#{message} (redirects are not followed)", **fields)
      when 401 then AuthenticationError.new(message, **fields)
      when 403 then PermissionDeniedError.new(message, **fields)
      when 404 then SecretNotFoundError.new(message, **fields)
      when 429 then RateLimitError.new(message, retry_after: retry_after(response[Rules::HEADER_RETRY_AFTER]), **fields)
      else ApiError.new(message, **fields)
      end
    end

    # The server's {"error": "..."} text, shortened, or nil when the body has none.
    def server_message(body)
      parsed = JSON.parse(body.to_s)
      text = parsed["error"] if parsed.is_a?(Hash)
      return nil unless text.is_a?(String) && !text.empty?

      text.length > MAX_DETAIL_LENGTH ? "#{text[0, MAX_DETAIL_LENGTH]}..." : text
    rescue JSON::ParserError, EncodingError
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
