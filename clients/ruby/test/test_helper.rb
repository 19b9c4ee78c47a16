# frozen_string_literal: true

# Shared test support: a tiny TCPServer-based HTTP stub, a fake cvsm API served by it, and a
# base test class that isolates CVSM_* variables.
$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "json"
require "socket"
require "uri"
require "minitest/autorun"
require "cvsm"

# StubServer is a minimal HTTP/1.1 server on 127.0.0.1 for tests. Each connection gets one
# response from the handler, then is closed. The handler returns [status, headers, body],
# :drop (close without answering), :drop_mid (close halfway through the body) or
# [:delay, seconds, response].
class StubServer
  Request = Struct.new(:method, :path, :query, :headers, keyword_init: true)

  def initialize(&handler)
    @handler = handler
    @log = []
    @log_mutex = Mutex.new
    @threads = []
    @server = TCPServer.new("127.0.0.1", 0)
    @acceptor = Thread.new { accept_loop }
  end

  def port
    @server.addr[1]
  end

  def base_url
    "http://127.0.0.1:#{port}/api/v1"
  end

  # StubServer#log returns every request received so far, oldest first.
  def log
    @log_mutex.synchronize { @log.dup }
  end

  def stop
    @server.close unless @server.closed?
    @acceptor.join(1)
    @threads.each(&:kill)
  end

  private

  def accept_loop
    loop do
      socket = @server.accept
      @threads << Thread.new(socket) { |s| serve(s) }
    end
  rescue IOError, Errno::EBADF
    nil
  end

  def serve(socket)
    request = read_request(socket)
    return if request.nil?

    @log_mutex.synchronize { @log << request }
    answer(socket, @handler.call(request))
  rescue IOError, SystemCallError
    nil
  ensure
    socket.close unless socket.closed?
  end

  def read_request(socket)
    line = socket.gets("\r\n")
    return nil if line.nil?

    method, target, = line.split(" ")
    headers = {}
    while (header = socket.gets("\r\n")) && header != "\r\n"
      name, value = header.split(":", 2)
      headers[name.strip.downcase] = value.to_s.strip
    end
    uri = URI.parse(target)
    query = uri.query ? URI.decode_www_form(uri.query).to_h : {}
    Request.new(method: method, path: uri.path, query: query, headers: headers)
  end

  def answer(socket, response)
    return if response == :drop

    if response == :drop_mid
      socket.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"secrets\": [")
      return
    end

    if response.is_a?(Array) && response[0] == :delay
      sleep(response[1])
      response = response[2]
    end
    status, headers, body = response
    body = body.to_s.b
    lines = ["HTTP/1.1 #{status} #{status == 200 ? 'OK' : 'Status'}",
             "Content-Length: #{body.bytesize}", "Connection: close"]
    headers.each { |name, value| lines << "#{name}: #{value}" }
    socket.write("#{lines.join("\r\n")}\r\n\r\n#{body}")
  end
end

# FakeApi answers the cvsm client endpoints from an in-memory list of secrets, checks the
# bearer token, and lets a test script faults for the next requests to a path.
class FakeApi
  TEAM_ID = "0b9f4a8e-4c8d-4a53-9d58-0f1d2a3b4c5d"
  TEAM_SLUG = "acme"
  TOKEN = "cvsm_#{'ab12' * 16}".freeze

  attr_accessor :token

  def initialize
    @token = TOKEN
    @secrets = []
    @scripts = []
    @mutex = Mutex.new
  end

  # FakeApi#add_secret stores a secret and returns its id.
  def add_secret(name, value, environment: "production")
    id = format("00000000-0000-4000-8000-%012d", @secrets.size + 1)
    @secrets << { "id" => id, "name" => name, "environment" => environment, "value" => value }
    id
  end

  # FakeApi#script makes the next requests whose path matches +pattern+ answer +responses+ in
  # order; afterwards the normal behaviour resumes.
  def script(pattern, *responses)
    @mutex.synchronize { @scripts << [pattern, responses] }
  end

  def call(request)
    scripted = next_scripted(request.path)
    return scripted if scripted
    return json(401, "error" => "token tidak valid") unless request.headers["authorization"] == "Bearer #{@token}"

    route(request)
  end

  def self.json(status, body, headers = {})
    [status, { "Content-Type" => "application/json" }.merge(headers), JSON.generate(body)]
  end

  private

  def json(...)
    self.class.json(...)
  end

  def next_scripted(path)
    @mutex.synchronize do
      entry = @scripts.find { |pattern, responses| pattern.match?(path) && !responses.empty? }
      entry&.last&.shift
    end
  end

  def route(request)
    prefix = "/api/v1/teams/#{TEAM_ID}"
    case request.path
    when "/api/v1/teams"
      json(200, "teams" => [{ "id" => "11111111-2222-4333-8444-555555555555", "slug" => "other" },
                            { "id" => TEAM_ID, "slug" => TEAM_SLUG, "name" => "Acme", "plan" => "starter" }])
    when "#{prefix}/secrets/export" then export(request.query)
    when "#{prefix}/secrets" then list(request.query)
    when %r{\A#{prefix}/secrets/([^/]+)\z}o then detail(Regexp.last_match(1))
    else json(404, "error" => "tidak ditemukan")
    end
  end

  def list(query)
    found = @secrets.select do |s|
      (query["environment"].nil? || s["environment"] == query["environment"]) &&
        (query["search"].nil? || s["name"].downcase.include?(query["search"].downcase))
    end
    items = found.map { |s| s.slice("id", "name", "environment").merge("type" => "credential") }
    json(200, "secrets" => items, "total" => items.size)
  end

  def detail(id)
    secret = @secrets.find { |s| s["id"] == id }
    return json(404, "error" => "tidak ditemukan") unless secret

    json(200, "secret" => secret.slice("id", "name", "environment"), "value" => secret["value"])
  end

  def export(query)
    return json(400, "error" => "format salah") unless query["format"] == "json"

    chosen = @secrets.select { |s| query["environment"].nil? || s["environment"] == query["environment"] }
    json(200, chosen.to_h { |s| [s["name"], s["value"]] })
  end
end

# CvsmTest is the base class of the SDK's tests: it removes every CVSM_* variable for the
# test, restores the environment afterwards, and stops the servers it started.
class CvsmTest < Minitest::Test
  TOKEN = FakeApi::TOKEN

  def setup
    @saved_env = ENV.to_h
    ENV.keys.grep(/\ACVSM_/).each { |name| ENV.delete(name) }
    @servers = []
  end

  def teardown
    @servers.each(&:stop)
    ENV.replace(@saved_env)
  end

  # Starts a FakeApi behind a StubServer; returns [api, server].
  def start_api
    api = FakeApi.new
    server = StubServer.new { |request| api.call(request) }
    @servers << server
    [api, server]
  end

  # Builds a client against +server+ with the fake API's token and team slug.
  def client_for(server, **options)
    Cvsm::Client.new(token: TOKEN, base_url: server.base_url, team: FakeApi::TEAM_SLUG, **options)
  end

  def json(status, body, headers = {})
    FakeApi.json(status, body, headers)
  end

  # The paths of the requests +server+ received, without the /api/v1 prefix.
  def paths(server)
    server.log.map { |r| r.path.delete_prefix("/api/v1") }
  end

  # A port on 127.0.0.1 where nothing listens.
  def closed_port
    socket = TCPServer.new("127.0.0.1", 0)
    port = socket.addr[1]
    socket.close
    port
  end
end
