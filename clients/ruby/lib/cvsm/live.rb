# frozen_string_literal: true

require "json"

# Live caches (+live: true+, +CVSM_LIVE=1+, rule R16): the client's change stream.
module Cvsm
  # A live client keeps one connection to the team's change stream,
  # +GET {base_url}/teams/{team}/secrets/changes?environment={env}+: server-sent events of names
  # and versions, never values. It is opened at the client's first read, on a thread of its own,
  # and shared by every name the client reads. Its +snapshot+ (on each connect) and each
  # +change+ tell the cache which values stopped being current (Cvsm::Cache#snapshot,
  # Cvsm::Cache#change); the next read of such a name fetches it. A name that does not change
  # costs what it costs without +live+ (one request per +cache_ttl+).
  #
  # While the stream is down (refused, dropped, no byte for 45 s) the cache works as without
  # +live+ (+cache_ttl+, stale-if-error), and the thread reconnects after a jittered, growing
  # pause (Live.reconnect_delay), sending +Last-Event-ID+ when an event carried an +id+. A
  # refusal (401, 403, 404) waits at least 300 s; a 429 at least its +Retry-After+. A 401 or 403,
  # and an +end+ event whose status is 401, 403 or 404, empty the cache as a refused read does.
  # @api private
  module Live
    # Seconds without a byte after which the stream counts as lost (the server sends a comment
    # every 15 s while idle).
    READ_TIMEOUT = Rules::LIVE_READ_TIMEOUT_SECONDS
    # The longest pause between two attempts, in seconds.
    MAX_BACKOFF = Rules::LIVE_MAX_BACKOFF_SECONDS.to_f
    # The shortest pause after the stream was refused (401, 403, 404): a revoked token is not
    # tried again every few seconds, which would also lock its prefix.
    REFUSED_BACKOFF = Rules::LIVE_REFUSED_BACKOFF_SECONDS.to_f
    # The statuses that refuse the stream for a long while.
    REFUSED = Rules::LIVE_REFUSED_STATUSES
    # The statuses that also empty the cache.
    FORGET = [401, 403].freeze

    # The pause before reconnection +attempt+ (0 for the first): 0.5 s doubling up to 30 s, each
    # taken at random between half and all of it.
    # @param attempt [Integer] the attempt, from 0
    # @param random [Random] the source of randomness
    # @return [Float] seconds
    def self.reconnect_delay(attempt, random = Random)
      (0.5 + (random.rand * 0.5)) * [MAX_BACKOFF, Rules::LIVE_BACKOFF_BASE_MS / 1000.0 * (2**[attempt, 16].min)].min
    end

    # The change stream answered with a status other than 200.
    class Refused < StandardError
      # @return [Integer] the HTTP status
      attr_reader :status
      # @return [Integer, nil] the Retry-After header in whole seconds, when it had one
      attr_reader :retry_after

      # @param status [Integer] the HTTP status
      # @param retry_after [Integer, nil] the Retry-After header in whole seconds
      def initialize(status, retry_after = nil)
        super("the change stream answered HTTP #{status}")
        @status = status
        @retry_after = retry_after
      end
    end

    # The server ended the stream with an +end+ event.
    class Ended < StandardError; end

    # Decodes the lines of a +text/event-stream+ into [event, data] pairs. Comments (+:+) are
    # skipped; +id+ is remembered in #last_id, for +Last-Event-ID+.
    class Decoder
      # @return [String, nil] the last event id the stream sent
      attr_reader :last_id

      def initialize
        @last_id = nil
        @event = +""
        @data = []
      end

      # Takes one line, without its line ending.
      # @param line [String] the line
      # @return [Array(String, String), nil] [event, data] when a blank line ends an event
      #   that had data, else nil
      def line(line)
        if line.empty?
          event = @event.empty? ? "message" : @event
          data = @data
          @event = +""
          @data = []
          return data.empty? ? nil : [event, data.join("\n")]
        end
        return nil if line.start_with?(":")

        field, colon, value = line.partition(":")
        value = colon.empty? ? "" : value.delete_prefix(" ")
        case field
        when "event" then @event = value
        when "data" then @data << value
        when "id" then @last_id = value unless value.include?("\0")
        end
        nil
      end
    end

    # Splits a byte stream into lines: at CR LF, LF or CR, as server-sent events allow.
    class Lines
      # A line ending; a CR at the end of what has arrived waits for what follows it.
      ENDING = /\r\n|\n|\r(?=[^\n])/.freeze

      def initialize
        @buffer = +"".b
      end

      # Takes one chunk of the body and yields every line it completes, as UTF-8.
      # @param chunk [String] bytes
      # @yieldparam line [String] a line, without its ending
      # @return [void]
      def feed(chunk)
        @buffer << chunk.b
        while (match = ENDING.match(@buffer))
          line = @buffer.byteslice(0, match.begin(0))
          @buffer = @buffer.byteslice(match.end(0)..)
          yield line.force_encoding(Encoding::UTF_8).scrub
        end
      end
    end

    # What one client's stream knows: whether it is up, the last event id, the pause to come.
    # +forget+ empties the client's cache and team key; +log+ takes a warning (a String that
    # names the team and environment, never a token or a value).
    class State
      # @return [String, nil] the id of the last event that carried one
      attr_accessor :last_event_id
      # @return [Integer] snapshots received: one per connection that got that far
      attr_reader :connections

      # @param cache [Cvsm::Cache] the client's cache
      # @param forget [#call] empties the client's cache and team key
      # @param log [#call] takes a warning line
      # @param describe [String] "team T, environment E", for the log lines
      # @param random [Random] the source of the pauses' randomness
      def initialize(cache, forget, log, describe, random: Random.new)
        @cache = cache
        @forget = forget
        @log = log
        @describe = describe
        @random = random
        @last_event_id = nil
        @connected = false
        @connections = 0
        @attempt = 0
        @outage_logged = false
      end

      # @return [Boolean] whether the stream is up (its snapshot taken, not lost since)
      def connected? = @connected

      # Applies one event.
      # @param name [String] the event's name
      # @param data [String] its data (JSON)
      # @return [void]
      # @raise [Ended] on +end+
      def event(name, data)
        payload = JSON.parse(data)
        return unless payload.is_a?(Hash)

        case name
        when "snapshot" then snapshot(payload)
        when "change" then change(payload)
        when "end"
          status = payload["status"]
          @forget.call if REFUSED.include?(status)
          raise Ended, "the server ended the change stream (#{payload['reason'] || status})"
        end
      rescue JSON::ParserError, EncodingError
        nil
      end

      # Notes that the stream is down (+reason+: no token, no value).
      # @param reason [String] why
      # @return [Float] the pause before the next attempt, in seconds
      def lost(reason)
        @connected = false
        unless @outage_logged
          @log.call("cvsm: live cache of #{@describe}: the change stream is down (#{reason}); values " \
                    "are cached for cache_ttl until it is back; reconnecting")
          @outage_logged = true
        end
        delay = Live.reconnect_delay(@attempt, @random)
        @attempt += 1
        delay
      end

      # Notes that the stream was refused.
      # @param refusal [Refused] the refusal
      # @return [Float] the pause before the next attempt, in seconds
      def refused(refusal)
        delay = lost(refusal.message)
        @forget.call if FORGET.include?(refusal.status) # as a refused read does
        delay = [delay, REFUSED_BACKOFF].max if REFUSED.include?(refusal.status)
        delay = [delay, refusal.retry_after.to_f].max if refusal.retry_after
        delay
      end

      private

      def snapshot(payload)
        secrets = payload["secrets"].is_a?(Hash) ? payload["secrets"] : {}
        versions = secrets.each_with_object({}) do |(secret, item), found|
          found[secret] = item["version"] if item.is_a?(Hash) && item["version"].is_a?(Integer)
        end
        @cache.snapshot(versions)
        @connections += 1
        @attempt = 0
        @outage_logged = false
        @connected = true
      end

      def change(payload)
        secret = payload["name"]
        return unless secret.is_a?(String)

        version = payload["version"]
        if payload["deleted"] == true
          @cache.change(secret, nil)
        elsif version.is_a?(Integer)
          @cache.change(secret, version)
        end
      end
    end

    # The change stream of one client, followed on a thread of its own until #stop.
    class Stream
      # @param transport [Cvsm::Transport] the client's transport
      # @param path [String] the stream's path, relative to the base URL
      # @param query [Hash] its query
      # @param state [State] what the stream knows
      def initialize(transport, path, query, state)
        @transport = transport
        @path = path
        @query = query
        @state = state
        @mutex = Mutex.new
        @wake = ConditionVariable.new
        @stopped = false
        @http = nil
        @thread = Thread.new { run }
        @thread.name = "cvsm-live"
        @thread.report_on_exception = false
      end

      # Ends the stream: closes its connection and joins the thread; idempotent.
      # @return [nil]
      def stop
        http = @mutex.synchronize do
          @stopped = true
          @wake.broadcast
          @http
        end
        begin
          http&.finish # wakes the read blocked on it
        rescue IOError, SystemCallError, OpenSSL::OpenSSLError
          nil # not started yet, or closed already
        end
        return nil if @thread == Thread.current

        @thread.kill unless @thread.join(5) # a connect that does not end within 5 s
        @thread.join
        nil
      end

      # @return [Boolean] whether the thread is still running
      def alive? = @thread.alive?

      private

      def stopped? = @mutex.synchronize { @stopped }

      def run
        until stopped?
          refusal = nil
          begin
            follow
            reason = "the server closed it"
          rescue Refused => e
            refusal = e
          rescue Ended => e
            reason = e.message
          rescue StandardError => e # whatever broke it, connect again later
            reason = e.class.name
          end
          break if stopped?

          pause(refusal ? @state.refused(refusal) : @state.lost(reason))
        end
      end

      def pause(seconds)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
        @mutex.synchronize do
          until @stopped || (left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)) <= 0
            @wake.wait(@mutex, left)
          end
        end
      end

      def follow
        headers = { "Accept" => Rules::ACCEPT_EVENT_STREAM, "Accept-Encoding" => "identity", "Cache-Control" => "no-cache" }
        headers[Rules::HEADER_LAST_EVENT_ID] = @state.last_event_id if @state.last_event_id
        started = lambda do |http|
          @mutex.synchronize do
            raise Ended, "closed" if @stopped

            @http = http
          end
        end
        @transport.stream(@path, @query, headers, read_timeout: READ_TIMEOUT, started: started) do |response|
          read(response)
        end
      ensure
        @mutex.synchronize { @http = nil }
      end

      def read(response)
        return if stopped?

        status = response.code.to_i
        raise Refused.new(status, @transport.retry_after(response[Rules::HEADER_RETRY_AFTER])) unless status == 200

        decoder = Decoder.new
        lines = Lines.new
        response.read_body do |chunk|
          lines.feed(chunk) do |line|
            event = decoder.line(line)
            @state.last_event_id = decoder.last_id if decoder.last_id
            @state.event(*event) if event
          end
          return if stopped?
        end
      end
    end
  end
end
