# frozen_string_literal: true

# The cvsm conformance driver for the Ruby SDK: reads one JSON request per line on stdin and
# writes one JSON response per line on stdout, as conformance/PROTOCOL.md describes.
# Run from anywhere: ruby clients/ruby/conformance/driver.rb

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "json"
require "cvsm"

# ConformanceDriver keeps the current client and answers protocol requests.
class ConformanceDriver
  OPTION_KEYS = %w[token base_url team environment cache_ttl timeout max_retries ca_file
                   stale_if_error live].freeze
  # The configuration new_client reports (conformance/PROTOCOL.md).
  CONFIG_KEYS = %i[base_url team environment cache_ttl timeout max_retries stale_if_error].freeze

  # Error kinds by SDK error class; the first match wins, so subclasses come first.
  KINDS = {
    Cvsm::ConfigurationError => "configuration",
    Cvsm::AuthenticationError => "authentication",
    Cvsm::PermissionDeniedError => "permission_denied",
    Cvsm::SecretNotFoundError => "not_found",
    Cvsm::RateLimitError => "rate_limited",
    Cvsm::ApiError => "api",
    Cvsm::NetworkError => "network",
    Cvsm::DecryptionError => "decryption"
  }.freeze

  # Raised for an op the driver does not know.
  class UnsupportedOp < StandardError; end

  # Raised when an op needs a client and none exists.
  class NoClient < StandardError; end

  def initialize(input, output)
    @input = input
    @output = output
    @client = nil
    @stale = false
  end

  # ConformanceDriver#run answers every line of input until shutdown or end of input.
  def run
    @input.each_line do |line|
      next if line.strip.empty?

      request = parse(line)
      next if request.nil?

      respond(request)
      break if request["op"] == "shutdown"
    end
  ensure
    @client&.close
  end

  private

  def parse(line)
    request = JSON.parse(line)
    raise JSON::ParserError, "request is not an object" unless request.is_a?(Hash)

    request
  rescue JSON::ParserError => e
    write("id" => nil, "ok" => false, "error" => error_body("internal", "bad request line: #{e.message}"))
    nil
  end

  def respond(request)
    args = request["args"].is_a?(Hash) ? request["args"] : {}
    result = dispatch(request["op"], args)
    write("id" => request["id"], "ok" => true, "result" => result)
  rescue Cvsm::Error => e
    kind = KINDS.find { |klass, _| e.is_a?(klass) }&.last || "internal"
    write("id" => request["id"], "ok" => false,
          "error" => error_body(kind, e.message, status: e.status, retry_after: e.retry_after,
                                                 request_id: e.request_id, suggestion: e.suggestion))
  rescue UnsupportedOp => e
    write("id" => request["id"], "ok" => false, "error" => error_body("unsupported", e.message))
  rescue StandardError => e
    warn("#{e.class}: #{e.message}\n  #{Array(e.backtrace).first(5).join("\n  ")}")
    write("id" => request["id"], "ok" => false,
          "error" => error_body("internal", "#{e.class}: #{e.message}"))
  end

  def dispatch(op, args)
    case op
    when "new_client" then new_client(args["options"] || {})
    when "get" then reading { { "value" => client.get(args["name"]) } }
    when "get_all" then reading { { "values" => client.get_all } }
    when "refresh" then { "value" => client.refresh(args["name"], environment: args["environment"]) }
    when "inject" then { "names" => client.inject(overwrite: args["overwrite"] == true) }
    when "clear_cache" then client.clear_cache.then { {} }
    when "describe" then { "text" => client.inspect }
    when "set_env" then set_env(args["set"] || {}, args["unset"] || [])
    when "capabilities" then { "capabilities" => Cvsm::Rules::CAPABILITIES }
    when "get_env" then { "values" => Array(args["names"]).to_h { |name| [name, env_value(name)] } }
    when "shutdown" then {}
    else raise UnsupportedOp, "unsupported op #{op.inspect}"
    end
  end

  # The client's stream thread (live) runs between ops on its own, as in an application; the
  # client replaced is closed, so that its stream ends.
  def new_client(options)
    @client&.close
    @client = nil
    unknown = options.keys - OPTION_KEYS
    warn("ignoring unknown options: #{unknown.join(', ')}") unless unknown.empty?
    keywords = options.slice(*OPTION_KEYS).transform_keys(&:to_sym)
    @client = Cvsm::Client.new(**keywords, on_stale: ->(_stale_read) { @stale = true })
    { "config" => @client.config.slice(*CONFIG_KEYS).transform_keys(&:to_s) }
  end

  # The read's result, with "stale" => true when the SDK's on_stale hook said it served a kept
  # value (R14): the driver never guesses.
  def reading
    @stale = false
    result = yield
    @stale ? result.merge("stale" => true) : result
  end

  def set_env(set, unset)
    set.each { |name, value| value.nil? ? ENV.delete(name) : ENV[name] = value.to_s }
    unset.each { |name| ENV.delete(name) }
    {}
  end

  # The variable's value as UTF-8 text, or nil when unset.
  def env_value(name)
    value = ENV.fetch(name, nil)
    value&.dup&.force_encoding(Encoding::UTF_8)
  end

  def client
    @client || raise(NoClient, "no client: call new_client first")
  end

  # Every key is always present (conformance/PROTOCOL.md); the fields come from the SDK error.
  def error_body(kind, message, status: nil, retry_after: nil, request_id: nil, suggestion: nil)
    { "kind" => kind, "message" => message, "status" => status, "retry_after" => retry_after,
      "request_id" => request_id, "suggestion" => suggestion }
  end

  def write(response)
    @output.write("#{JSON.generate(response)}\n")
    @output.flush
  end
end

$stdin.set_encoding(Encoding::UTF_8)
$stdout.set_encoding(Encoding::UTF_8)
$stdout.sync = true
ConformanceDriver.new($stdin, $stdout).run
exit 0
