# frozen_string_literal: true

# The public entry point: Cvsm::Client reads secrets of one team and environment.
module Cvsm
  # Cvsm::Client reads secret values of one team and environment, caches them for
  # +cache_ttl+ seconds and can copy them into ENV. It is safe to share between threads.
  #
  #   client = Cvsm::Client.new(team: "acme")   # token and base URL from CVSM_* variables
  #   client.get("DATABASE_URL")                # => "postgres://..."
  #   client.inject                             # => ["API_KEY", "DATABASE_URL"]
  class Client
    UUID_PATTERN = /\A\h{8}-\h{4}-\h{4}-\h{4}-\h{12}\z/.freeze
    # A valid secret name (R10); anything else is not found without a request.
    NAME_PATTERN = /\A[A-Za-z_][A-Za-z0-9_]{0,254}\z/.freeze
    # A name #inject can put in the process environment (R8).
    VARIABLE_PATTERN = /\A[A-Za-z_][A-Za-z0-9_]*\z/.freeze

    # What each answer must look like (R3); anything else is unreadable and retried.
    TEAMS = Transport::Shape.new("an object with a teams array",
                                 ->(data) { data.is_a?(Hash) && data["teams"].is_a?(Array) })
    LISTING = Transport::Shape.new("an object with a secrets array",
                                   ->(data) { data.is_a?(Hash) && data["secrets"].is_a?(Array) })
    VALUE = Transport::Shape.new("an object with a string value",
                                 ->(data) { data.is_a?(Hash) && data["value"].is_a?(String) })
    EXPORT = Transport::Shape.new(
      "an object whose values are all strings",
      ->(data) { data.is_a?(Hash) && data.each_value.all? { |value| value.is_a?(String) } }
    )

    # The statuses that mean the base URL, team or environment is wrong (R9).
    WRONG_BASE_URL_OR_TEAM = "check the base URL, which ends in /api/v1, and the team"
    TEAMS_MISCONFIGURED = { 404 => WRONG_BASE_URL_OR_TEAM }.freeze
    SECRETS_MISCONFIGURED = {
      404 => WRONG_BASE_URL_OR_TEAM, 400 => "check the environment name"
    }.freeze
    private_constant :TEAMS, :LISTING, :VALUE, :EXPORT, :WRONG_BASE_URL_OR_TEAM,
                     :TEAMS_MISCONFIGURED, :SECRETS_MISCONFIGURED

    # Cvsm::Client.new builds a client; every keyword is optional and falls back to its
    # CVSM_* variable (CVSM_TOKEN, CVSM_BASE_URL, CVSM_TEAM, CVSM_ENVIRONMENT, CVSM_CACHE_TTL,
    # CVSM_TIMEOUT, CVSM_MAX_RETRIES, CVSM_CA_FILE), then to its default. The proxy variables
    # (https_proxy, http_proxy, no_proxy and their upper-case forms) are read here too.
    #
    # +ca_file+ names a PEM bundle trusted instead of the system's certificates.
    # +http_factory+ is the transport seam: a callable taking the request's URI and returning a
    # new, not yet started Net::HTTP for its host and port (proxies are then its business); the
    # client still sets use_ssl, the timeouts, max_retries = 0 and, with a ca_file, the CA.
    #
    # It raises Cvsm::ConfigurationError when the token, base URL or team is missing or an option
    # is invalid. No request is sent until the first read.
    def initialize(token: nil, base_url: nil, team: nil, environment: nil, cache_ttl: nil,
                   timeout: nil, max_retries: nil, ca_file: nil, http_factory: nil)
      @config = Configuration.new(
        token: token, base_url: base_url, team: team, environment: environment,
        cache_ttl: cache_ttl, timeout: timeout, max_retries: max_retries, ca_file: ca_file,
        http_factory: http_factory
      )
      @transport = Transport.new(@config)
      @cache = Cache.new(@config.cache_ttl)
      @team_mutex = Mutex.new
      @team_id = nil
    end

    # Cvsm::Client#base_url is the API root in use, including /api/v1, without a trailing slash.
    def base_url = @config.base_url
    # Cvsm::Client#team is the team as configured: a team id or a slug.
    def team = @config.team
    # Cvsm::Client#environment is the environment read from (default "production").
    def environment = @config.environment
    # Cvsm::Client#cache_ttl is how many seconds values are cached (0: no cache).
    def cache_ttl = @config.cache_ttl
    # Cvsm::Client#timeout is the limit in seconds of each attempt, from connecting to the
    # last byte of the answer.
    def timeout = @config.timeout
    # Cvsm::Client#max_retries is how many extra attempts a GET may make.
    def max_retries = @config.max_retries
    # Cvsm::Client#ca_file is the PEM bundle trusted instead of the system's, or nil.
    def ca_file = @config.ca_file

    # Cvsm::Client#config returns the effective configuration as a Hash, without the token.
    def config
      @config.to_h
    end

    # Cvsm::Client#get returns the value of secret +name+ (case-sensitive) in the client's
    # environment, from the cache when it is fresh. It raises Cvsm::SecretNotFoundError when the
    # name is absent (its +suggestion+ names a secret that differs only in case) or is not a
    # valid secret name (without a request), or another Cvsm::Error.
    def get(name)
      check_name(name)
      cached = @cache.read([:secret, environment, name])
      return cached.dup if cached

      reading do
        secret_id = find_secret_id(name)
        value = @transport.get_json("/teams/#{segment(team_id)}/secrets/#{segment(secret_id)}",
                                    shape: VALUE).data["value"]
        @cache.write([:secret, environment, name], value.dup.freeze)
        value
      end
    end

    # Cvsm::Client#get_all returns every secret of the client's environment as a Hash of
    # name => value, through the JSON export. The result is cached as a whole and also fills
    # the per-name cache, so a later #get makes no request.
    def get_all
      cached = @cache.read([:all, environment])
      return copy(cached) if cached

      reading do
        values = @transport.get_json("/teams/#{segment(team_id)}/secrets/export",
                                     { format: "json", environment: environment },
                                     shape: EXPORT, misconfigured: SECRETS_MISCONFIGURED).data
        frozen = values.to_h { |k, v| [k.dup.freeze, v.dup.freeze] }.freeze
        @cache.write_many(frozen.map { |k, v| [[:secret, environment, k], v] })
        @cache.write([:all, environment], frozen)
        values
      end
    end

    # Cvsm::Client#inject copies every secret of #get_all into ENV. A variable that is already
    # set is kept unless +overwrite+ is true. It returns the names it set, sorted.
    #
    # It is all or nothing: every name it would set must be a valid variable name and every
    # such value free of NUL characters, or it raises Cvsm::ConfigurationError naming the first
    # secret that is not (never its value) and sets nothing.
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

    # Cvsm::Client#clear_cache forgets every cached value, so the next read asks the server.
    def clear_cache
      @cache.clear
      nil
    end

    # Cvsm::Client#inspect shows the effective configuration; never the token or a value.
    def inspect
      "#<#{self.class.name} #{shown_settings.map { |k, v| "#{k}=#{v.inspect}" }.join(' ')}>"
    end
    alias to_s inspect

    # Cvsm::Client#pretty_print makes pp show the same text as #inspect.
    def pretty_print(printer)
      printer.text(inspect)
    end

    # Cvsm::Client#encode_with makes to_yaml write the configuration of #inspect, nothing else.
    def encode_with(coder)
      shown_settings.each { |key, value| coder[key.to_s] = value }
    end

    # A client is not rebuilt from YAML: it would have no token. Build a new one instead.
    def init_with(_coder)
      raise TypeError, "a #{self.class.name} cannot be loaded from YAML; build a new one"
    end

    # Cvsm::Client#as_json and #to_json give the configuration of #inspect, nothing else.
    def as_json(*) = shown_settings.transform_keys(&:to_s)
    def to_json(*args) = as_json.to_json(*args)

    # A client cannot be marshalled: it holds the token and cached values.
    def marshal_dump
      raise TypeError, "#{self.class.name} cannot be marshalled (it holds a token and secret values)"
    end

    private

    # The configuration as #inspect, YAML and JSON show it: no token, no password in the URL.
    def shown_settings
      config.merge(base_url: display_url(base_url))
    end

    # Runs a read; an authentication error empties the whole cache before it propagates.
    def reading
      yield
    rescue AuthenticationError
      @cache.clear
      raise
    end

    # Raises SecretNotFoundError unless +name+ is a valid secret name (R10). Matching works on
    # the bytes, so a name that is not valid UTF-8 is refused like any other.
    def check_name(name)
      return if name.is_a?(String) && NAME_PATTERN.match?(name.b)

      shown = name.inspect
      shown = "#{name[0, 64].inspect}... (#{name.length} characters)" if name.is_a?(String) && name.length > 64
      raise SecretNotFoundError,
            "secret name #{shown} is not valid: letters, digits and _, not starting with a digit, " \
            "at most 255 characters"
    end

    def find_secret_id(name)
      listing = @transport.get_json("/teams/#{segment(team_id)}/secrets",
                                    { environment: environment, search: name },
                                    shape: LISTING, misconfigured: SECRETS_MISCONFIGURED)
      entries = listing.data["secrets"].select { |s| s.is_a?(Hash) && s["name"].is_a?(String) }
      entries = entries.reject { |s| s["environment"].is_a?(String) && s["environment"] != environment }
      exact = entries.find { |s| s["name"] == name && s["id"] }
      return exact["id"].to_s if exact

      similar = entries.find { |s| s["name"].casecmp?(name) }&.fetch("name")
      message = "secret #{name.inspect} not found in #{environment}"
      message = "#{message}; did you mean #{similar.inspect}?" if similar
      raise SecretNotFoundError.new(message, request_id: listing.request_id, suggestion: similar)
    end

    # The team id: the configured team when it is a UUID, otherwise the id of the caller's team
    # whose slug matches, looked up once per client.
    def team_id
      return team if UUID_PATTERN.match?(team)

      @team_mutex.synchronize { @team_id ||= resolve_team_slug }
    end

    def resolve_team_slug
      reply = @transport.get_json("/teams", shape: TEAMS, misconfigured: TEAMS_MISCONFIGURED)
      match = reply.data["teams"].find { |t| t.is_a?(Hash) && t["slug"] == team && t["id"] }
      unless match
        raise ConfigurationError.new("team #{team.inspect} matches none of your teams",
                                     request_id: reply.request_id)
      end

      match["id"].to_s
    end

    # Percent-encodes one path segment.
    def segment(text)
      text.to_s.b.gsub(/[^A-Za-z0-9\-._~]/n) { |c| format("%%%02X", c.ord) }
    end

    def copy(values)
      values.to_h { |k, v| [k.dup, v.dup] }
    end

    # The URL without any user:password part, for display.
    def display_url(url)
      url.sub(%r{\A([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@}, '\\1')
    end
  end
end
