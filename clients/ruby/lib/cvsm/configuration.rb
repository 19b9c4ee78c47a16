# frozen_string_literal: true

require "uri"

# Resolving a client's settings from keyword arguments and CVSM_* environment variables.
module Cvsm
  # Cvsm::Configuration holds a client's effective settings. Each one comes from the explicit
  # keyword argument when it is given (not nil), otherwise from its environment variable,
  # otherwise from its default. Invalid or missing settings raise Cvsm::ConfigurationError
  # naming the variable. The token is kept but never shown by #inspect or #to_h.
  class Configuration
    DEFAULT_ENVIRONMENT = "production"
    DEFAULT_CACHE_TTL = 30
    DEFAULT_TIMEOUT = 10
    DEFAULT_MAX_RETRIES = 2

    attr_reader :token, :base_url, :team, :environment, :cache_ttl, :timeout, :max_retries

    def initialize(token: nil, base_url: nil, team: nil, environment: nil, cache_ttl: nil,
                   timeout: nil, max_retries: nil, env: ENV)
      @env = env
      @token = required(token, "token", "CVSM_TOKEN")
      @base_url = normalize_base_url(base_url)
      @team = required(team, "team", "CVSM_TEAM")
      @environment = string_option(environment, "environment") || from_env("CVSM_ENVIRONMENT") ||
                     DEFAULT_ENVIRONMENT
      @cache_ttl = resolve_cache_ttl(cache_ttl)
      @timeout = resolve_timeout(timeout)
      @max_retries = resolve_max_retries(max_retries)
      @env = nil
    end

    # Cvsm::Configuration#to_h returns the effective settings without the token.
    def to_h
      {
        base_url: base_url, team: team, environment: environment,
        cache_ttl: cache_ttl, timeout: timeout, max_retries: max_retries
      }
    end

    # Cvsm::Configuration#inspect shows the settings and never the token.
    def inspect
      "#<#{self.class.name} #{to_h.map { |k, v| "#{k}=#{v.inspect}" }.join(' ')}>"
    end
    alias to_s inspect

    private

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
        raise(ConfigurationError, "#{variable} is not set (pass #{option}: or set #{variable})")
    end

    def normalize_base_url(explicit)
      source = string_option(explicit, "base_url") ? "base_url" : "CVSM_BASE_URL"
      url = required(explicit, "base_url", "CVSM_BASE_URL").strip.sub(%r{/+\z}, "")
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

    def resolve_cache_ttl(explicit)
      unless explicit.nil?
        return explicit if explicit.is_a?(Integer) && explicit >= 0

        raise ConfigurationError, "cache_ttl must be a non-negative integer (seconds)"
      end
      raw = from_env("CVSM_CACHE_TTL")
      return DEFAULT_CACHE_TTL if raw.nil?
      return Integer(raw.strip, 10) if raw.strip.match?(/\A\d+\z/)

      raise ConfigurationError, "CVSM_CACHE_TTL must be a non-negative integer (seconds)"
    end

    def resolve_timeout(explicit)
      return DEFAULT_TIMEOUT if explicit.nil?
      return explicit if explicit.is_a?(Numeric) && explicit.real? && explicit.positive? &&
                         explicit.to_f.finite?

      raise ConfigurationError, "timeout must be a positive number of seconds"
    end

    def resolve_max_retries(explicit)
      return DEFAULT_MAX_RETRIES if explicit.nil?
      return explicit if explicit.is_a?(Integer) && explicit >= 0

      raise ConfigurationError, "max_retries must be a non-negative integer"
    end
  end
end
