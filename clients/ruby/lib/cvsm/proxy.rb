# frozen_string_literal: true

require "ipaddr"
require "uri"

# Choosing the HTTP proxy for the API from the proxy environment variables.
module Cvsm
  # Reads http_proxy/HTTP_PROXY (for an http base URL), https_proxy/HTTPS_PROXY (for https) and no_proxy/NO_PROXY, as curl understands them. Net::HTTP's own lookup is not
  # used: it reads http_proxy even for https URLs, never proxies a loopback address, resolves
  # the host name, and happens at every connection instead of once when the client is built.
  # @api private
  module Proxy
    module_function

    # Returns the proxy URI for requests to +uri+, or nil for a
    # direct connection. An empty variable counts as unset. A proxy URL without a scheme is
    # taken as http://. It raises Cvsm::ConfigurationError, naming the variable but not its
    # value (it may hold a password), when the URL is not a usable http:// proxy.
    def for(uri, env)
      scheme = uri.scheme.downcase
      variable = ["#{scheme}_proxy", "#{scheme.upcase}_PROXY"].find { |name| present?(env[name]) }
      return nil if variable.nil?

      no_proxy = [env["no_proxy"], env["NO_PROXY"]].find { |value| present?(value) }
      return nil if no_proxy && bypass?(uri, no_proxy)

      parse(env[variable].strip, variable)
    end

    # Tells whether +no_proxy+ (entries separated by commas
    # or spaces: "*", a host name that also matches its subdomains, ".domain", an IP address or
    # CIDR range, each optionally with ":port") exempts +uri+ from the proxy.
    def bypass?(uri, no_proxy)
      host = uri.hostname.to_s.downcase
      no_proxy.split(/[\s,]+/).any? do |entry|
        next true if entry == "*"

        pattern, port = split_port(entry.downcase)
        next false if pattern.nil? || pattern.empty? || (port && port != uri.port)

        matches_host?(host, pattern)
      end
    end

    def present?(value)
      !value.nil? && !value.strip.empty?
    end

    def split_port(entry)
      if entry.start_with?("[")
        host, rest = entry[1..].split("]", 2)
        [host, rest&.delete_prefix(":")&.then { |p| p.empty? ? nil : Integer(p, 10) }]
      elsif entry.count(":") == 1
        host, port = entry.split(":")
        [host, Integer(port, 10)]
      else
        [entry, nil]
      end
    rescue ArgumentError, TypeError
      [nil, nil]
    end

    def matches_host?(host, pattern)
      if (address = ip(host))
        range = ip(pattern)
        return range ? range.include?(address) : false
      end

      domain = pattern.delete_prefix("*").delete_prefix(".")
      host == domain || host.end_with?(".#{domain}")
    end

    def ip(text)
      IPAddr.new(text)
    rescue IPAddr::Error
      nil
    end

    def parse(text, variable)
      text = "http://#{text}" unless text.match?(%r{\A[A-Za-z][A-Za-z0-9+.-]*://})
      proxy = URI.parse(text)
      unless proxy.is_a?(URI::HTTP) && proxy.scheme.casecmp?("http") && present?(proxy.hostname)
        raise ConfigurationError, "#{variable} is not an http:// proxy URL (only http:// proxies are supported)"
      end

      proxy
    rescue URI::InvalidURIError
      raise ConfigurationError, "#{variable} is not a valid proxy URL"
    end

    private_class_method :present?, :split_port, :matches_host?, :ip, :parse
  end
end
