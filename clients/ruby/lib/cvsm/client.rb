# frozen_string_literal: true

# The public entry point: Cvsm::Client reads secrets of one team and environment.
module Cvsm
  # Reads the secrets of one team and environment, caches them for +cache_ttl+ seconds and can
  # copy them into +ENV+. It is safe to share between threads. +inspect+, +pp+, YAML and JSON
  # show its configuration, never the token or a value; Marshal refuses it. With +live: true+ it
  # keeps one change-stream connection, on a thread of its own, that drops a changed value from
  # the cache at once; {#close} ends it.
  #
  # @example Read one secret, then all of them into ENV
  #   client = Cvsm::Client.new(team: ENV.fetch("CVSM_TEAM")) # token and base URL from CVSM_* too
  #   client.get("DATABASE_URL")                              # => "postgres://..."
  #   client.inject                                           # => ["API_KEY", "DATABASE_URL"]
  class Client
    include Redaction::Settings

    # A valid secret name (R10); anything else is not found without a request.
    NAME_PATTERN = /\A#{Rules::SECRET_NAME_PATTERN}\z/
    # A name #inject can put in the process environment (R8).
    VARIABLE_PATTERN = /\A#{Rules::VARIABLE_NAME_PATTERN}\z/

    # What each answer must look like (R3); anything else is unreadable and retried.
    LISTING = Transport::Shape.new("an object with a secrets array",
                                   ->(data) { data.is_a?(Hash) && data["secrets"].is_a?(Array) })
    BY_NAME = Transport::Shape.new(
      "an object with a secret object and a string value",
      ->(data) { data.is_a?(Hash) && data["secret"].is_a?(Hash) && data["value"].is_a?(String) }
    )
    EXPORT = Transport::Shape.new(
      "an object whose values are all strings",
      ->(data) { data.is_a?(Hash) && data.each_value.all? { |value| value.is_a?(String) } }
    )
    # Its links are read with the key (E2E.parse_links): a malformed one is a DecryptionError.
    TEAM_KEY = Transport::Shape.new(
      "an object with a string team_id, an integer key_version and a string wrapped_key",
      lambda do |data|
        data.is_a?(Hash) && data["team_id"].is_a?(String) && data["key_version"].is_a?(Integer) &&
          data["wrapped_key"].is_a?(String)
      end
    )

    # The statuses that mean the base URL, team or environment is wrong (R9). A 404 to the read
    # by name is not one of them: the listing that follows it decides.
    WRONG_ENVIRONMENT = "check the environment name"
    BY_NAME_MISCONFIGURED = { 400 => WRONG_ENVIRONMENT }.freeze
    SECRETS_MISCONFIGURED = {
      404 => "check the base URL, which ends in /api/v1, and the team", 400 => WRONG_ENVIRONMENT
    }.freeze
    TEAM_KEY_MISCONFIGURED = SECRETS_MISCONFIGURED.merge(
      400 => "the team is not end-to-end, so its token has no key part"
    ).freeze
    # Why a token without its key part cannot read an end-to-end team: a by-name answer marked
    # "e2e" or an export answer carrying Cvsm-E2E: 1.
    KEY_PART_NEEDED = "#{Rules::MESSAGE_KEYLESS_E2E} " \
                      "(cvsm_<64 hex>.<key>.<key version>.<commitment>, as it was shown when it was made) to open"
    private_constant :LISTING, :BY_NAME, :EXPORT, :TEAM_KEY, :WRONG_ENVIRONMENT,
                     :BY_NAME_MISCONFIGURED, :SECRETS_MISCONFIGURED, :TEAM_KEY_MISCONFIGURED,
                     :KEY_PART_NEEDED

    # Builds a client; every keyword is optional. A keyword that is nil falls back to its
    # +CVSM_*+ variable, then to its default. The proxy variables (+https_proxy+, +http_proxy+,
    # +no_proxy+ and their upper-case forms) are read here too. No request is sent until the
    # first read.
    #
    # @param token [String, nil] API token (+cvsm_...+) or JWT, trimmed of surrounding
    #   whitespace; +CVSM_TOKEN+. Required. The token of an end-to-end team carries its key
    #   after a dot (+cvsm_<64 hex>.<key>+): only the part before the dot is sent, and the key
    #   opens the team's values in this process.
    # @param base_url [String, nil] API root including +/api/v1+; +CVSM_BASE_URL+. Required.
    # @param team [String, nil] team id (UUID) or slug; +CVSM_TEAM+. Required.
    # @param environment [String, nil] environment to read; +CVSM_ENVIRONMENT+, then +"production"+
    # @param cache_ttl [Integer, nil] seconds a value stays cached, 0 for none; +CVSM_CACHE_TTL+, then 30
    # @param timeout [Numeric, nil] seconds per attempt, from connecting to the last byte of the
    #   answer; +CVSM_TIMEOUT+, then 10
    # @param max_retries [Integer, nil] extra attempts after a network error, an unreadable
    #   answer or a 502/503/504; +CVSM_MAX_RETRIES+, then 2
    # @param ca_file [String, nil] PEM bundle trusted instead of the system's certificates;
    #   +CVSM_CA_FILE+
    # @param stale_if_error [Integer, nil] seconds each value is kept after it stops being fresh,
    #   to answer a read whose refresh fails with a network error, a 5xx or a 429;
    #   +CVSM_STALE_IF_ERROR+, then 0 (off)
    # @param on_stale [#call, nil] called with a {Cvsm::StaleRead} each time a read is answered
    #   with a kept value; what it raises propagates from the read
    # @param logger [#warn, nil] where the stale-read warning goes, once per secret (a +Logger+,
    #   say); default +Kernel#warn+, which +$VERBOSE = nil+ silences
    # @param http_factory [#call, nil] the transport seam: called with the request's URI, returns
    #   a new, not yet started +Net::HTTP+ for its host and port (proxies are then its business);
    #   the client still sets +use_ssl+, the timeouts, +max_retries = 0+ and, with a +ca_file+,
    #   the CA
    # @param live [Boolean, nil] keep one connection to the team's change stream
    #   (+GET /teams/{team}/secrets/changes+), opened at the first read on a thread of its own,
    #   so that a changed secret stops being served from the cache at once (R16); +CVSM_LIVE+
    #   (+1+/+true+/+yes+/+on+ or +0+/+false+/+no+/+off+, any case), then off. While the stream
    #   is down the cache works as without it. Call {#close} when done with the client.
    # @raise [Cvsm::ConfigurationError] when the token, base URL or team is missing, or an
    #   option or variable is invalid, a +cvsm_+ token's key part included (the message names
    #   it, never the token)
    def initialize(token: nil, base_url: nil, team: nil, environment: nil, cache_ttl: nil,
                   timeout: nil, max_retries: nil, ca_file: nil, stale_if_error: nil,
                   on_stale: nil, logger: nil, http_factory: nil, live: nil)
      @config = Configuration.new(
        token: token, base_url: base_url, team: team, environment: environment,
        cache_ttl: cache_ttl, timeout: timeout, max_retries: max_retries, ca_file: ca_file,
        stale_if_error: stale_if_error, on_stale: on_stale, logger: logger,
        http_factory: http_factory, live: live
      )
      @transport = Transport.new(@config)
      @cache = Cache.new(@config.cache_ttl, @config.stale_if_error)
      @warned = {} # what a stale-read warning was logged for, until its next successful read
      @warned_mutex = Mutex.new
      @team_key = nil # an end-to-end team's key (E2E::TeamKey), once fetched, until clear_cache
      @team_key_mutex = Mutex.new
      @live = @config.live ? new_live_state : nil
      @stream = nil # the Live::Stream, from the first read until #close
      @stream_pid = nil # the process that opened it
      @stream_mutex = Mutex.new
      @closed = false
    end

    # @return [String] the API root in use, including +/api/v1+, without a trailing slash
    def base_url = @config.base_url
    # @return [String] the team as configured: a team id or a slug, used in paths as is
    def team = @config.team
    # @return [String] the environment read (default +"production"+)
    def environment = @config.environment
    # @return [Integer] how many seconds values are cached (0: no cache)
    def cache_ttl = @config.cache_ttl
    # @return [Numeric] the limit in seconds of each attempt, from connecting to the last byte
    #   of the answer
    def timeout = @config.timeout
    # @return [Integer] how many extra attempts a GET may make
    def max_retries = @config.max_retries
    # @return [Integer] how many seconds past +cache_ttl+ a value is kept to answer a read whose
    #   refresh fails (0: never)
    def stale_if_error = @config.stale_if_error
    # @return [String, nil] the PEM bundle trusted instead of the system's, or nil
    def ca_file = @config.ca_file
    # @return [Boolean] whether the client keeps a change stream open (+live:+, +CVSM_LIVE+)
    def live? = @config.live

    # @return [Boolean] whether the change stream of a live client is up now: connected and its
    #   snapshot taken (always false without +live+)
    def live_connected?
      !@live.nil? && @live.connected?
    end

    # The effective configuration, without the token.
    # @return [Hash{Symbol => Object}] +base_url+, +team+, +environment+, +cache_ttl+,
    #   +timeout+, +max_retries+, +stale_if_error+ and +live+
    def config
      @config.to_h
    end

    # Reads one secret of the client's environment: from the cache when it is fresh, otherwise
    # with one request, +GET /teams/{team}/secrets/by-name/{name}+. When that answers 404, a
    # listing tells a missing secret from a wrong team or base URL. With +stale_if_error+, a
    # refresh that fails with a network error, a 5xx or a 429 returns the kept value instead,
    # and +on_stale+ and the logger hear of it. In an end-to-end team the value is opened here,
    # with the team key fetched once (+GET /teams/{team}/e2e/key+, a second request at the
    # first read) and kept until {#clear_cache}.
    #
    # @param name [String] the secret's name (case-sensitive)
    # @return [String] its value (a new string, which the caller may change)
    # @raise [Cvsm::SecretNotFoundError] when the name is absent (its +suggestion+ names a secret
    #   that differs only in case) or is not a valid secret name (no request is sent)
    # @raise [Cvsm::ConfigurationError] when the server says the base URL, team or environment
    #   is wrong, or the team is end-to-end and the token has no key part
    # @raise [Cvsm::DecryptionError] when the team is end-to-end and the value does not open
    # @raise [Cvsm::Error] another subclass for any other failure
    def get(name)
      check_name(name)
      key = [:secret, environment, name]
      cached = @cache.read(key)
      return cached.dup if cached

      start_stream
      mark = @cache.mark
      missing = nil
      value = refreshing(key, name) do
        fetched, version = read_by_name(name, environment)
        @cache.write(key, fetched.dup.freeze, name: name, version: version, mark: mark)
        forget_warnings([name])
        fetched
      rescue SecretNotFoundError => e # a 404 to the read by name: a listing decides, never a kept value
        missing = e
        nil
      end
      missing ? raise(absent(name, missing, environment)) : value
    end

    # Reads one secret past the cache, with one request as {#get} makes
    # (+GET /teams/{team}/secrets/by-name/{name}+), for the pattern "my database login failed:
    # fetch the credential again once" (R17). Its errors, retries and not-found listing are
    # those of {#get}, but a cached value never answers, nor a kept one (+stale_if_error+ does
    # not apply: the caller asked for the current value). In the client's environment the cache
    # then holds the value read; another environment's value is returned and not cached.
    #
    # @example After a login failure, once
    #   begin
    #     connect(client.get("DB_PASSWORD"))
    #   rescue PG::ConnectionBad
    #     connect(client.refresh("DB_PASSWORD")) # the rotated password, if it changed
    #   end
    # @param name [String] the secret's name (case-sensitive)
    # @param environment [String, nil] the environment to read; nil for the client's own
    # @return [String] its current value (a new string, which the caller may change)
    # @raise [Cvsm::ConfigurationError] when +environment+ is neither nil nor a non-empty
    #   string, or as {#get} raises it
    # @raise [Cvsm::SecretNotFoundError] as {#get} raises it
    # @raise [Cvsm::Error] another subclass for any other failure, as {#get}
    def refresh(name, environment: nil)
      unless environment.nil? || (environment.is_a?(String) && !environment.empty?)
        raise ConfigurationError, "refresh: environment must be a non-empty string, or nil for the client's own"
      end

      check_name(name)
      env = environment || self.environment
      start_stream
      mark = @cache.mark
      value, version = guarded { read_by_name(name, env) }
      if env == self.environment
        @cache.write([:secret, env, name], value.dup.freeze, name: name, version: version, mark: mark)
        forget_warnings([name])
      end
      value
    rescue SecretNotFoundError => e
      raise if e.status.nil? # an invalid name, refused without a request

      raise absent(name, e, env)
    end

    # Reads every secret of the client's environment with one request, through the JSON
    # export. The result is cached as a whole and also fills the per-name cache, so a later
    # {#get} makes no request. A failed refresh falls back on a kept result as {#get} does
    # (+on_stale+ gets a {Cvsm::StaleRead} whose name is nil). In an end-to-end team every
    # value is opened here, as {#get} does.
    #
    # @return [Hash{String => String}] name => value (a new Hash)
    # @raise [Cvsm::ConfigurationError] when the server says the base URL, team or environment
    #   is wrong, or the team is end-to-end (the answer carries +Cvsm-E2E: 1+) and the token has
    #   no key part; nothing is cached then
    # @raise [Cvsm::DecryptionError] when the team is end-to-end and a value does not open
    # @raise [Cvsm::Error] another subclass for the failure it names
    def get_all
      key = [:all, environment]
      cached = @cache.read(key)
      return copy(cached) if cached

      start_stream
      mark = @cache.mark
      refreshing(key, nil) do
        reply = @transport.get_json("/teams/#{segment(team)}/secrets/export",
                                    { format: "json", environment: environment },
                                    shape: EXPORT, misconfigured: SECRETS_MISCONFIGURED)
        values = if @config.private_key
                   open_values(reply.data, reply.request_id, environment)
                 elsif reply.end_to_end
                   raise ConfigurationError.new("#{KEY_PART_NEEDED} the secrets of #{environment}",
                                                request_id: reply.request_id)
                 else
                   reply.data
                 end
        frozen = values.to_h { |k, v| [k.dup.freeze, v.dup.freeze] }.freeze
        @cache.write_many(frozen.map { |k, v| [[:secret, environment, k], v, k] } << [key, frozen], mark: mark)
        forget_warnings([nil, *frozen.keys])
        values
      end
    end

    # Copies every secret of {#get_all} into +ENV+. A variable that is already set is kept
    # unless +overwrite+ is true. It is all or nothing: every name it would set must be a valid
    # variable name and every such value free of NUL characters.
    #
    # @param overwrite [Boolean] replace variables that are already set
    # @return [Array<String>] the names it set, sorted
    # @raise [Cvsm::ConfigurationError] naming the first secret that cannot be set (never its
    #   value); nothing is set then
    # @raise [Cvsm::Error] another subclass when the read fails
    def inject(overwrite: false)
      values = get_all
      values.keys.sort.each do |name|
        next if VARIABLE_PATTERN.match?(name.b)

        raise ConfigurationError,
              "secret #{name.inspect} cannot be set in the environment: not a valid variable name; " \
              "nothing was set"
      end
      names = values.keys.select { |name| overwrite || !ENV.key?(name) }.sort
      names.each do |name|
        next unless values[name].include?("\0")

        raise ConfigurationError,
              "secret #{name.inspect} cannot be set in the environment: its value holds a NUL " \
              "character; nothing was set"
      end
      names.each { |name| ENV[name] = values[name] }
      names
    end

    # Forgets every cached value, kept ones included, so that the next read asks the server and
    # has nothing to fall back on; in an end-to-end team, the team key too, fetched again at the
    # next read.
    # @return [nil]
    def clear_cache
      forget_all
      nil
    end

    # Ends a live client's change stream: closes its connection and joins its thread. Reads
    # still work afterwards, as without +live+ (no stream is opened again). Idempotent; a
    # client without +live+ has nothing to close.
    # @return [nil]
    def close
      stream = @stream_mutex.synchronize do
        @closed = true
        @stream
      end
      stream&.stop
      nil
    end

    # Refuses to rebuild a client from YAML: it would have no token. Build a new one instead.
    # @param _coder [Psych::Coder] the YAML coder
    # @raise [TypeError] always
    def init_with(_coder)
      raise TypeError, "a #{self.class.name} cannot be loaded from YAML; build a new one"
    end

    private

    def marshal_refusal = "#{self.class.name} cannot be marshalled (it holds a token and secret values)"

    # The configuration as #inspect, YAML and JSON show it: no token, no password in the URL.
    def shown_settings
      config.merge(base_url: Configuration.display_url(base_url))
    end

    # Runs a request; an authentication or permission error (401, 403) empties the whole cache,
    # kept values and the team key included, before it propagates, so a revoked token stops
    # working at once.
    def guarded
      yield
    rescue AuthenticationError, PermissionDeniedError
      forget_all
      raise
    end

    def forget_all
      @cache.clear
      @team_key_mutex.synchronize { @team_key = nil }
    end

    # A live client's stream state: its log lines go where stale-read warnings go.
    def new_live_state
      log = ->(message) { @config.logger ? @config.logger.warn(message) : warn(message) }
      Live::State.new(@cache, method(:forget_all), log,
                      "team #{team.inspect}, environment #{environment.inspect}")
    end

    # Opens the change stream of a live client, once, at its first read; never after #close.
    # A process forked from one whose client had opened it (a preforking server's worker) opens
    # its own: the thread did not survive the fork.
    def start_stream
      return if @live.nil? || (@stream && @stream_pid == Process.pid)

      @stream_mutex.synchronize do
        next if (@stream && @stream_pid == Process.pid) || @closed

        @stream_pid = Process.pid
        @stream = Live::Stream.new(@transport, "/teams/#{segment(team)}/secrets/changes",
                                   { environment: environment }, @live)
      end
    end

    # Runs a refresh of the value under +key+ (+name+: the secret, or nil for get_all). When it
    # fails in a way R14 allows and the cache still keeps a value there, that value answers
    # instead: on_stale is called and a warning logged, once per name until a refresh succeeds.
    def refreshing(key, name, &refresh)
      guarded(&refresh)
    rescue NetworkError, RateLimitError, ApiError => e
      kept = stale_allowed?(e) && @cache.read_kept(key)
      raise unless kept

      @config.on_stale&.call(StaleRead.new(name: name, error: e, age: kept.age))
      warn_stale(name, e, kept.age)
      name ? kept.value.dup : copy(kept.value)
    end

    # A network error (after the retries, an unreadable answer included), a 429 or a 5xx (after
    # the retries): what a kept value may stand in for. Never a 3xx, a 4xx or a configuration
    # error.
    def stale_allowed?(error)
      !error.is_a?(ApiError) || (500..599).cover?(error.status)
    end

    def warn_stale(name, error, age)
      first = @warned_mutex.synchronize { @warned.key?(name) ? false : (@warned[name] = true) }
      return unless first

      what = name ? "secret #{name.inspect}" : "get_all"
      cause = error.class.name
      cause = "#{cause} (HTTP #{error.status})" if error.status
      message = "cvsm: #{what} of #{environment} answered with the value kept from #{age.floor}s " \
                "ago (stale_if_error): the refresh failed with #{cause}; not logged again for it " \
                "until a refresh succeeds"
      @config.logger ? @config.logger.warn(message) : warn(message)
    end

    def forget_warnings(names)
      @warned_mutex.synchronize { names.each { |name| @warned.delete(name) } unless @warned.empty? }
    end

    # Raises SecretNotFoundError unless +name+ is a valid secret name (R10). Matching works on
    # the bytes, so a name that is not valid UTF-8 is refused like any other.
    def check_name(name)
      return if name.is_a?(String) && NAME_PATTERN.match?(name.b)

      shown = name.inspect
      shown = "#{name[0, 64].inspect}... (#{name.length} characters)" if name.is_a?(String) && name.length > 64
      raise SecretNotFoundError,
            format(Rules::MESSAGE_INVALID_SECRET_NAME, shown)
    end

    # [value, version] of +name+ in +env+, read with one request (the version nil when the
    # answer does not say it); in an end-to-end team, opened (which fetches the team key first
    # when it is not held).
    def read_by_name(name, env)
      reply = @transport.get_json("/teams/#{segment(team)}/secrets/by-name/#{segment(name)}",
                                  { environment: env },
                                  shape: BY_NAME, misconfigured: BY_NAME_MISCONFIGURED)
      version = reply.data["secret"]["version"]
      version = nil unless version.is_a?(Integer)
      return [open_values({ name => reply.data["value"] }, reply.request_id, env)[name], version] if @config.private_key
      return [reply.data["value"], version] unless end_to_end?(reply.data)

      raise ConfigurationError.new("#{KEY_PART_NEEDED} secret #{name.inspect}", request_id: reply.request_id)
    end

    # Whether a read by name answered for an end-to-end team: "e2e": true beside the value, or
    # in the secret object.
    def end_to_end?(data)
      data["e2e"] == true || data["secret"]["e2e"] == true
    end

    # Opens +envelopes+ (name => cvsm-e2e1 envelope) with the team key for the environment and
    # the names asked for. The key is fetched when none is held or an envelope is sealed under
    # another key version than the held one (then once only: a version that still differs is a
    # DecryptionError). A DecryptionError carries the request id of the answer it came from.
    def open_values(envelopes, request_id, env)
      parsed = envelopes.to_h do |name, envelope|
        [name, E2E.parse_envelope(envelope) ||
          raise(DecryptionError.new("secret #{name.inspect} of #{env} is not a sealed value " \
                                    "(cvsm-e2e1), though the token carries a key", request_id: request_id))]
      end
      team_key = team_key_for(parsed.each_value.map(&:key_version).uniq)
      parsed.to_h do |name, envelope|
        [name, open_value(envelope, team_key, name, request_id, env)]
      end
    end

    def open_value(envelope, team_key, name, request_id, env)
      key = team_key.key(envelope.key_version)
      unless key
        raise DecryptionError.new(
          "secret #{name.inspect} of #{env} is sealed under key version " \
          "#{envelope.key_version}, but the team key sent for this token is version #{team_key.key_version}",
          request_id: request_id
        )
      end
      E2E.open_value(envelope, key, team_id: team_key.team_id, environment: env, name: name)
    rescue DecryptionError => e
      raise e.request_id ? e : DecryptionError.new(e.message, request_id: request_id)
    end

    # The team keys for values sealed under +versions+: the held ones, or ones fetched and
    # verified now when none are held or a version is not among them (a version above the held
    # current one after a re-key, or one below what the chain was walked down to). Nothing is
    # kept when the fetch or the check fails.
    def team_key_for(versions)
      @team_key_mutex.synchronize do
        if versions.any? && (@team_key.nil? || versions.any? { |version| !@team_key.key?(version) })
          @team_key = fetch_team_key(versions.min)
        end
        @team_key
      end
    end

    # One request, GET /teams/{team}/e2e/key: the team key wrapped to this token, unwrapped with
    # the token's key part, then checked against the token's pin through the answer's links
    # (docs/e2e.md "Format 2"), walking down to +lowest+ when it is below the pin. Any failure
    # is a DecryptionError, never retried.
    def fetch_team_key(lowest)
      reply = @transport.get_json("/teams/#{segment(team)}/e2e/key", nil,
                                  shape: TEAM_KEY, misconfigured: TEAM_KEY_MISCONFIGURED)
      data = reply.data
      team_id = data["team_id"]
      current = data["key_version"]
      links = E2E.parse_links(data["links"])
      key = E2E.unwrap_team_key(data["wrapped_key"], team_id: team_id, key_version: current,
                                                     private_key: @config.private_key)
      pin_version, pin_commitment = @config.pin
      keys = E2E.verify_chain(key, current, team_id, links, pin_version, pin_commitment, down_to: lowest)
      E2E::TeamKey.new(team_id, current, keys)
    rescue DecryptionError => e
      raise DecryptionError.new(e.message, request_id: reply&.request_id)
    end

    # The error for a name the read by name in +env+ answered 404 to (+answer+), as the listing decides:
    # its 404 or 400 raises Cvsm::ConfigurationError (a wrong base URL, team or environment);
    # a listing makes the not-found error, with the 404's status and request id, suggesting a
    # listed name that differs only in case.
    def absent(name, answer, env)
      listing = guarded do
        @transport.get_json("/teams/#{segment(team)}/secrets",
                            { environment: env, search: name },
                            shape: LISTING, misconfigured: SECRETS_MISCONFIGURED)
      end
      similar = listing.data["secrets"].find do |entry|
        entry.is_a?(Hash) && entry["name"].is_a?(String) && entry["name"] != name &&
          entry["name"].casecmp?(name) &&
          (!entry["environment"].is_a?(String) || entry["environment"] == env)
      end&.fetch("name")
      message = "secret #{name.inspect} not found in #{env}"
      message = "#{message}#{format(Rules::MESSAGE_DID_YOU_MEAN, similar)}" if similar
      SecretNotFoundError.new(message, status: answer.status, request_id: answer.request_id,
                                       suggestion: similar)
    end

    # Percent-encodes one path segment.
    def segment(text)
      text.to_s.b.gsub(/[^A-Za-z0-9\-._~]/n) { |c| format("%%%02X", c.ord) }
    end

    def copy(values)
      values.to_h { |k, v| [k.dup, v.dup] }
    end
  end
end
