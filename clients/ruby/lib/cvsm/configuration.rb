# frozen_string_literal: true

require "net/http"
require "openssl"
require "uri"

# Resolving a client's settings from keyword arguments and CVSM_* environment variables.
module Cvsm
  # Holds a client's effective settings. Each one comes from the explicit keyword argument when it is given (not nil), otherwise from its environment variable,
  # otherwise from its default. Invalid or missing settings raise Cvsm::ConfigurationError
  # naming the variable. Everything, the proxy variables included, is read once, here.
  #
  # The token is held in a wrapper that #inspect, YAML, JSON and Marshal never reveal;
  # Configuration#inspect, #to_h, #to_yaml and #to_json never show it either.
  # @api private
  class Configuration
    include Redaction::Settings

    # The environment read when neither +environment:+ nor CVSM_ENVIRONMENT says.
    DEFAULT_ENVIRONMENT = Rules::DEFAULT_ENVIRONMENT
    # Seconds a value stays cached by default.
    DEFAULT_CACHE_TTL = Rules::DEFAULT_CACHE_TTL_SECONDS
    # Seconds per attempt by default.
    DEFAULT_TIMEOUT = Rules::DEFAULT_TIMEOUT_SECONDS
    # Extra attempts by default.
    DEFAULT_MAX_RETRIES = Rules::DEFAULT_MAX_RETRIES
    # Seconds a value is kept for stale-if-error by default: off.
    DEFAULT_STALE_IF_ERROR = Rules::DEFAULT_STALE_IF_ERROR_SECONDS
    # What CVSM_LIVE accepts (R16), any case, for on and for off.
    LIVE_ON = Rules::LIVE_TRUE_WORDS
    # What CVSM_LIVE accepts for off.
    LIVE_OFF = Rules::LIVE_FALSE_WORDS

    # Spaces, tabs, carriage returns and line feeds around a token are dropped (R6), so a token
    # read from a mounted file works.
    TOKEN_PADDING = /\A[ \t\r\n]+|[ \t\r\n]+\z/n.freeze
    # What a token may hold once trimmed: visible ASCII only.
    TOKEN_CHARACTERS = /\A[!-~]+\z/n.freeze
    private_constant :TOKEN_PADDING, :TOKEN_CHARACTERS
    # The scheme of a URL, then its user and password up to the last "@" of the authority.
    USERINFO = %r{\A([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@}.freeze
    private_constant :USERINFO

    # +url+ as it may be printed: a user and password in it show as +***+
    # (+https://***@host/api/v1+), as every SDK prints it.
    # @param url [String]
    # @return [String]
    def self.display_url(url) = url.sub(USERINFO, '\1***@')

    # +url+ without a user and password: the client authenticates with its Bearer token only, so
    # they are never sent.
    # @param url [String]
    # @return [String]
    def self.without_userinfo(url) = url.sub(USERINFO, '\1')

    # Holds the token so that no printing or serialisation of an object that refers to it shows
    # it: #inspect, #to_s, YAML and JSON give "[REDACTED]", Marshal refuses. The string lives in
    # a closure, not in an instance variable, so dumping instance variables shows no token either.
    class Redacted
      include Redaction::Placeholder

      # What it prints as.
      TEXT = "[REDACTED]"

      # @param value [String] the token
      def initialize(value)
        value = value.dup.freeze
        @reveal = -> { value }
        freeze
      end

      # The wrapped string; the only way to read it.
      # @return [String]
      def reveal = @reveal.call

      private

      def redacted_text = TEXT
      def marshal_refusal = "a cvsm token cannot be marshalled"
    end
    private_constant :Redacted

    # @return [String] the API root, without a trailing slash
    attr_reader :base_url
    # @return [String] the API root without a user and password: where requests go
    attr_reader :api_root
    # @return [String] the team id or slug
    attr_reader :team
    # @return [String] the environment read
    attr_reader :environment
    # @return [Integer] seconds a value stays cached
    attr_reader :cache_ttl
    # @return [Numeric] seconds per attempt
    attr_reader :timeout
    # @return [Integer] extra attempts after a retryable failure
    attr_reader :max_retries
    # @return [String, nil] the PEM bundle trusted instead of the system's
    attr_reader :ca_file
    # @return [Integer] seconds a value is kept past +cache_ttl+ for stale-if-error
    attr_reader :stale_if_error
    # @return [OpenSSL::X509::Store, nil] the store built from +ca_file+
    attr_reader :cert_store
    # @return [URI::HTTP, nil] the proxy chosen from the environment, or nil
    attr_reader :proxy
    # @return [#call, nil] the transport seam
    attr_reader :http_factory
    # @return [#call, nil] the stale-read hook
    attr_reader :on_stale
    # @return [#warn] where stale-read warnings go
    attr_reader :logger
    # @return [Boolean] whether the client keeps a change stream open (R16)
    attr_reader :live

    def initialize(token: nil, base_url: nil, team: nil, environment: nil, cache_ttl: nil,
                   timeout: nil, max_retries: nil, ca_file: nil, stale_if_error: nil,
                   http_factory: nil, on_stale: nil, logger: nil, live: nil, env: ENV)
      @env = env
      bearer, key, pin_version, pin_commitment = resolve_token(token)
      @token = Redacted.new(bearer)
      @private_key = key && Redacted.new(key)
      @pin = key && Redacted.new([pin_version, pin_commitment].freeze)
      @base_url = normalize_base_url(base_url)
      @api_root = Configuration.without_userinfo(@base_url)
      @team = required(team, "team", Rules::ENV_TEAM)
      @environment = string_option(environment, "environment") || from_env(Rules::ENV_ENVIRONMENT) ||
                     DEFAULT_ENVIRONMENT
      @cache_ttl = resolve_seconds(cache_ttl, "cache_ttl", Rules::ENV_CACHE_TTL, DEFAULT_CACHE_TTL)
      @stale_if_error = resolve_seconds(stale_if_error, "stale_if_error", Rules::ENV_STALE_IF_ERROR,
                                        DEFAULT_STALE_IF_ERROR)
      @timeout = resolve_timeout(timeout)
      @max_retries = resolve_max_retries(max_retries)
      @ca_file, @cert_store = resolve_ca_file(ca_file)
      @proxy = Proxy.for(URI.parse(@base_url), env)
      @http_factory = callable(http_factory, "http_factory", "#call(uri) and return a Net::HTTP")
      @on_stale = callable(on_stale, "on_stale", "#call(stale_read)")
      @logger = resolve_logger(logger)
      @live = resolve_live(live)
      @env = nil
    end

    # the bearer token, trimmed and checked: for a token of an end-to-end team, the part before
    # the dot alone.
    def token = @token.reveal

    # the token's key part (the 32-byte X25519 private key of an end-to-end team's token), or
    # nil for a token without one. It is never sent anywhere.
    def private_key = @private_key&.reveal

    # the token's pin, [key version, 32-byte commitment] (docs/e2e.md "Format 2"), or nil for a
    # token without a key part.
    def pin = @pin&.reveal

    # Returns the effective settings without the token.
    def to_h
      {
        base_url: base_url, team: team, environment: environment,
        cache_ttl: cache_ttl, timeout: timeout, max_retries: max_retries,
        stale_if_error: stale_if_error, live: live
      }
    end


    # Returns a new, not yet started Net::HTTP for +uri+: the
    # http_factory's, or one through the proxy chosen from the environment.
    def new_http(uri)
      return @http_factory.call(uri) if @http_factory

      if proxy
        Net::HTTP.new(uri.hostname, uri.port, proxy.hostname, proxy.port,
                      unescape(proxy.user), unescape(proxy.password))
      else
        Net::HTTP.new(uri.hostname, uri.port, nil) # nil: no proxy lookup by Net::HTTP itself
      end
    end

    private

    def shown_settings = to_h.merge(base_url: Configuration.display_url(base_url))
    def marshal_refusal = "#{self.class.name} cannot be marshalled (it holds a token)"

    def from_env(variable)
      value = @env[variable]
      value.nil? || value.empty? ? nil : value
    end

    def string_option(value, option)
      return nil if value.nil?
      raise ConfigurationError, "#{option} must be a string" unless value.is_a?(String)

      value.empty? ? nil : value
    end

    def required(value, option, variable)
      string_option(value, option) || from_env(variable) ||
        raise(ConfigurationError, "#{format(Rules::MESSAGE_NOT_SET, variable)} (pass #{option}: or set #{variable})")
    end

    # [API token, private key or nil]: the token, trimmed of surrounding whitespace (nothing but
    # visible ASCII may remain), split from its key part. The messages never hold the token:
    # work on bytes, so no encoding error can quote it either.
    def resolve_token(explicit)
      source = string_option(explicit, "token") ? "token" : "CVSM_TOKEN"
      token = required(explicit, "token", Rules::ENV_TOKEN).b.gsub(TOKEN_PADDING, "")
      raise ConfigurationError, "#{source} is blank (only whitespace)" if token.empty?
      unless token.match?(TOKEN_CHARACTERS)
        raise ConfigurationError,
              "#{source} holds a character other than visible ASCII (a space, a control character " \
              "or a non-ASCII character inside it); the token is not shown"
      end

      split_token(token.force_encoding(Encoding::UTF_8), source)
    end

    # [API token, private key, pin version, pin commitment] (the last three nil for a token
    # without a key part): a token of an end-to-end team carries its key and its pin after a
    # dot (cvsm_<64 hex>.<key>.<key version>.<commitment>); a token of the first format (no
    # pin) or a cvsm_ token with a dot of any other shape is refused, without quoting it. A JWT
    # (dots, but no cvsm_ prefix) is not split.
    def split_token(token, source)
      E2E.split_token(token)
    rescue E2E::FirstFormatToken
      raise ConfigurationError,
            "#{Rules::MESSAGE_FIRST_FORMAT_TOKEN} for the team (docs/e2e.md): #{source} has a key " \
            "part of the first format (cvsm_<64 hex>.<key>, no pin); the token is not shown"
    rescue ArgumentError
      raise ConfigurationError,
            "#{source} has a key part after its dot but is not cvsm_<64 hex>.<private key>.<key " \
            "version>.<commitment> (the token of an end-to-end team); the token is not shown"
    end

    def normalize_base_url(explicit)
      source = string_option(explicit, "base_url") ? "base_url" : "CVSM_BASE_URL"
      url = required(explicit, "base_url", Rules::ENV_BASE_URL).strip.sub(%r{/+\z}, "")
      uri = begin
        URI.parse(url)
      rescue URI::InvalidURIError
        nil
      end
      unless uri.is_a?(URI::HTTP) && uri.host && !uri.host.empty?
        raise ConfigurationError, "#{source} is not a valid http(s) URL"
      end

      url
    end

    # A whole number of seconds, zero or more: cache_ttl and stale_if_error.
    def resolve_seconds(explicit, option, variable, default)
      unless explicit.nil?
        return explicit if explicit.is_a?(Integer) && explicit >= 0

        raise ConfigurationError, "#{option} must be a non-negative integer (seconds)"
      end
      raw = from_env(variable)
      return default if raw.nil?
      return Integer(raw.strip, 10) if raw.strip.match?(/\A\d+\z/)

      raise ConfigurationError, "#{variable} must be a non-negative integer (seconds)"
    end

    def resolve_timeout(explicit)
      unless explicit.nil?
        return explicit if explicit.is_a?(Numeric) && explicit.real? && explicit.positive? &&
                           explicit.to_f.finite?

        raise ConfigurationError, "timeout must be a positive number of seconds"
      end
      raw = from_env(Rules::ENV_TIMEOUT)&.strip
      return DEFAULT_TIMEOUT if raw.nil?

      seconds = if raw.match?(/\A\d+\z/) then Integer(raw, 10)
                elsif raw.match?(/\A\d*\.\d+\z|\A\d+\.\d*\z/) then Float(raw)
                end
      return seconds if seconds&.positive?

      raise ConfigurationError, "CVSM_TIMEOUT must be a positive number of seconds"
    end

    def resolve_max_retries(explicit)
      unless explicit.nil?
        return explicit if explicit.is_a?(Integer) && explicit >= 0

        raise ConfigurationError, "max_retries must be a non-negative integer"
      end
      raw = from_env(Rules::ENV_MAX_RETRIES)&.strip
      return DEFAULT_MAX_RETRIES if raw.nil?
      return Integer(raw, 10) if raw.match?(/\A\d+\z/)

      raise ConfigurationError, "CVSM_MAX_RETRIES must be a non-negative integer"
    end

    # [path, store]: the PEM bundle named by ca_file: or CVSM_CA_FILE, loaded now into a
    # certificate store that replaces the system's; [nil, nil] when neither is set.
    def resolve_ca_file(explicit)
      explicit = explicit.to_path if explicit.respond_to?(:to_path)
      source = string_option(explicit, "ca_file") ? "ca_file" : "CVSM_CA_FILE"
      path = string_option(explicit, "ca_file") || from_env(Rules::ENV_CA_FILE)
      return [nil, nil] if path.nil?

      File.open(path, &:readbyte) # a clear message for a missing, unreadable or empty file
      store = OpenSSL::X509::Store.new
      store.add_file(path)
      [path, store]
    rescue SystemCallError, IOError, EOFError, OpenSSL::X509::StoreError => e
      reason = e.is_a?(OpenSSL::X509::StoreError) || e.is_a?(EOFError) ? "no PEM certificate in it" : e.message
      raise ConfigurationError, "#{source} #{path.inspect} cannot be used as a CA bundle: #{reason}"
    end

    # The live option when given (true or false), else CVSM_LIVE (1/true/yes/on or
    # 0/false/no/off, any case), else off.
    def resolve_live(explicit)
      unless explicit.nil?
        return explicit if [true, false].include?(explicit)

        raise ConfigurationError, "live must be true or false"
      end
      raw = from_env(Rules::ENV_LIVE)&.strip&.downcase
      return false if raw.nil?
      return true if LIVE_ON.include?(raw)
      return false if LIVE_OFF.include?(raw)

      raise ConfigurationError, "CVSM_LIVE must be 1 or 0 (or true/false, yes/no, on/off)"
    end

    def callable(value, option, contract)
      return value if value.nil? || value.respond_to?(:call)

      raise ConfigurationError, "#{option} must respond to #{contract}"
    end

    def resolve_logger(logger)
      return logger if logger.nil? || logger.respond_to?(:warn)

      raise ConfigurationError, "logger must respond to #warn(message), as a Logger does"
    end

    def unescape(text)
      text && URI::DEFAULT_PARSER.unescape(text)
    end
  end
end
