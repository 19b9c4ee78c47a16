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

    # Cvsm::Client.new builds a client; every keyword is optional and falls back to its
    # CVSM_* variable (CVSM_TOKEN, CVSM_BASE_URL, CVSM_TEAM, CVSM_ENVIRONMENT, CVSM_CACHE_TTL),
    # then to its default. It raises Cvsm::ConfigurationError when the token, base URL or team
    # is missing or an option is invalid. No request is sent until the first read.
    def initialize(token: nil, base_url: nil, team: nil, environment: nil, cache_ttl: nil,
                   timeout: nil, max_retries: nil)
      @config = Configuration.new(
        token: token, base_url: base_url, team: team, environment: environment,
        cache_ttl: cache_ttl, timeout: timeout, max_retries: max_retries
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
    # Cvsm::Client#timeout is the per-attempt timeout in seconds.
    def timeout = @config.timeout
    # Cvsm::Client#max_retries is how many extra attempts a GET may make.
    def max_retries = @config.max_retries

    # Cvsm::Client#config returns the effective configuration as a Hash, without the token.
    def config
      @config.to_h
    end

    # Cvsm::Client#get returns the value of secret +name+ (case-sensitive) in the client's
    # environment, from the cache when it is fresh. It raises Cvsm::SecretNotFoundError when the
    # name is absent (suggesting a name that differs only in case), or another Cvsm::Error.
    def get(name)
      raise ArgumentError, "name must be a non-empty String" unless name.is_a?(String) && !name.empty?

      cached = @cache.read([:secret, environment, name])
      return cached.dup if cached

      reading do
        secret_id = find_secret_id(name)
        detail = @transport.get_json("/teams/#{segment(team_id)}/secrets/#{segment(secret_id)}")
        value = detail["value"] if detail.is_a?(Hash)
        raise NetworkError, "unexpected response from the secret endpoint" unless value.is_a?(String)

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
                                     { format: "json", environment: environment })
        unless values.is_a?(Hash) && values.all? { |k, v| k.is_a?(String) && v.is_a?(String) }
          raise NetworkError, "unexpected response from the export endpoint"
        end

        frozen = values.to_h { |k, v| [k.freeze, v.dup.freeze] }.freeze
        @cache.write_many(frozen.map { |k, v| [[:secret, environment, k], v] })
        @cache.write([:all, environment], frozen)
        values
      end
    end

    # Cvsm::Client#inject copies every secret of #get_all into ENV. A variable that is already
    # set is kept unless +overwrite+ is true. It returns the names it set, sorted.
    def inject(overwrite: false)
      values = get_all
      names = values.keys.select { |name| overwrite || !ENV.key?(name) }.sort
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
      settings = config.merge(base_url: display_url(base_url))
      "#<#{self.class.name} #{settings.map { |k, v| "#{k}=#{v.inspect}" }.join(' ')}>"
    end
    alias to_s inspect

    # Cvsm::Client#pretty_print makes pp show the same text as #inspect.
    def pretty_print(printer)
      printer.text(inspect)
    end

    private

    # Runs a read; an authentication error empties the whole cache before it propagates.
    def reading
      yield
    rescue AuthenticationError
      @cache.clear
      raise
    end

    def find_secret_id(name)
      listing = @transport.get_json("/teams/#{segment(team_id)}/secrets",
                                    { environment: environment, search: name })
      secrets = listing["secrets"] if listing.is_a?(Hash)
      raise NetworkError, "unexpected response from the secrets list" unless secrets.is_a?(Array)

      entries = secrets.select { |s| s.is_a?(Hash) && s["name"].is_a?(String) }
      entries = entries.reject { |s| s["environment"].is_a?(String) && s["environment"] != environment }
      exact = entries.find { |s| s["name"] == name }
      return exact["id"].to_s if exact && exact["id"]

      raise SecretNotFoundError, not_found_message(name, entries)
    end

    def not_found_message(name, entries)
      message = "secret #{name.inspect} not found in #{environment}"
      similar = entries.find { |s| s["name"].casecmp?(name) }
      similar ? "#{message}; did you mean #{similar['name'].inspect}?" : message
    end

    # The team id: the configured team when it is a UUID, otherwise the id of the caller's team
    # whose slug matches, looked up once per client.
    def team_id
      return team if UUID_PATTERN.match?(team)

      @team_mutex.synchronize { @team_id ||= resolve_team_slug }
    end

    def resolve_team_slug
      body = @transport.get_json("/teams")
      teams = body["teams"] if body.is_a?(Hash)
      raise NetworkError, "unexpected response from the teams list" unless teams.is_a?(Array)

      match = teams.find { |t| t.is_a?(Hash) && t["slug"] == team && t["id"] }
      raise ConfigurationError, "team #{team.inspect} matches none of your teams" unless match

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
