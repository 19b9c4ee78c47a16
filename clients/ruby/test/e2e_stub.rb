# frozen_string_literal: true

# What e2e_test.rb runs against until its cases move into the conformance suite: an in-process
# fake end-to-end team (FakeApi on a StubServer) and the sealing half of docs/e2e.md (E2ESeal).
# Every other test uses conformance/stub.py (test_helper.rb's StubApi).
require "socket"

# StubServer is a minimal HTTP/1.1 server on 127.0.0.1 for e2e_test.rb's FakeApi. Each connection
# gets one response from the handler ([status, headers, body]), then is closed. Every answer
# carries X-Request-Id: req-<n>, n counting the requests from 1, unless the response sets its own.
class StubServer
  Request = Struct.new(:method, :target, :path, :query, :headers, keyword_init: true)

  def initialize(&handler)
    @handler = handler
    @log = []
    @log_mutex = Mutex.new
    @threads = []
    @server = TCPServer.new("127.0.0.1", 0)
    @acceptor = Thread.new { accept_loop }
  end

  def base_url = "http://127.0.0.1:#{@server.addr[1]}/api/v1"

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

    number = @log_mutex.synchronize { @log << request }.size
    socket.write(raw_response(*@handler.call(request), number))
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
    Request.new(method: method, target: target, path: uri.path, query: query, headers: headers)
  end

  def raw_response(status, headers, body, number)
    body = body.to_s.b
    lines = ["HTTP/1.1 #{status} #{status == 200 ? 'OK' : 'Status'}",
             "Content-Length: #{body.bytesize}", "Connection: close"]
    lines << "X-Request-Id: req-#{number}" unless headers.keys.any? { |name| name.casecmp?("X-Request-Id") }
    headers.each { |name, value| lines << "#{name}: #{value}" }
    "#{lines.join("\r\n")}\r\n\r\n".b + body
  end
end

# E2ESeal is the writing half of docs/e2e.md, for the tests alone (the SDK only opens): key
# pairs, team-key wraps and sealed values, built with OpenSSL as Cvsm::E2E builds the keys.
module E2ESeal
  module_function

  def b64u(bytes) = [bytes].pack("m0").tr("+/", "-_").delete("=")

  # C_v, the commitment to a team key of a version (docs/e2e.md "Format 2").
  def commitment(team_key, team_id, key_version)
    OpenSSL::KDF.hkdf(team_key, salt: "", info: "cvsm-e2e:v2:commit:#{team_id}:#{key_version}", length: 32,
                                hash: "SHA256")
  end

  # cvsm-link1: the key of version - 1 sealed under the key of version.
  def link(new_key, old_key, team_id, version)
    nonce = OpenSSL::Random.random_bytes(12)
    "cvsm-link1.#{b64u(nonce)}.#{b64u(encrypt(new_key, nonce, old_key, "cvsm-e2e:v2:link:#{team_id}:#{version}"))}"
  end

  # [private key, public key], 32 raw bytes each.
  def key_pair
    key = OpenSSL::PKey.generate_key("X25519")
    [key.private_to_der.byteslice(-32, 32), key.public_to_der.byteslice(-32, 32)]
  end

  def encrypt(key, nonce, plain, aad)
    cipher = OpenSSL::Cipher.new("aes-256-gcm").encrypt
    cipher.key = key
    cipher.iv = nonce
    cipher.auth_data = aad
    ct = plain.empty? ? +"" : cipher.update(plain)
    ct << cipher.final
    ct << cipher.auth_tag
  end

  # cvsm-wrap1: +team_key+ wrapped to the raw X25519 public key +recipient+.
  def wrap(team_key, team_id, key_version, recipient)
    eph = OpenSSL::PKey.generate_key("X25519")
    eph_public = eph.public_to_der.byteslice(-32, 32)
    shared = eph.derive(OpenSSL::PKey.read(Cvsm::E2E::PUBLIC_DER_PREFIX + recipient))
    wrapping = OpenSSL::KDF.hkdf(shared, salt: eph_public + recipient, info: "cvsm-e2e:v1:wrap", length: 32,
                                         hash: "SHA256")
    nonce = OpenSSL::Random.random_bytes(12)
    ct = encrypt(wrapping, nonce, team_key, "cvsm-e2e:v1:team-key:#{team_id}:#{key_version}")
    "cvsm-wrap1.#{b64u(eph_public)}.#{b64u(nonce)}.#{b64u(ct)}"
  end

  # cvsm-e2e1: +value+ sealed for version +version+ of secret +secret_id+.
  def seal(value, team_key, key_version, team_id:, secret_id:, version:, environment:, name:)
    nonce = OpenSSL::Random.random_bytes(12)
    aad = "cvsm-e2e:v1:secret:#{team_id}:#{secret_id}:#{version}:#{environment}:#{name}"
    "cvsm-e2e1.#{key_version}.#{secret_id}.#{version}.#{b64u(nonce)}.#{b64u(encrypt(team_key, nonce, value.b, aad))}"
  end
end

# FakeApi answers the reads by name, the JSON export and the team key from an in-memory list of
# secrets, checks the bearer token, and lets a test script answers for the next requests to a
# path. Its paths take the team's id or slug, as the server's do. After #end_to_end! it serves an end-to-end team:
# values sealed under a team key (with "e2e": true on the read by name and Cvsm-E2E: 1 on the
# JSON export) and the team key wrapped to one token's public key at GET /teams/{team}/e2e/key.
class FakeApi
  TEAM_ID = "0b9f4a8e-4c8d-4a53-9d58-0f1d2a3b4c5d"
  TEAM_SLUG = "acme"
  TOKEN = "cvsm_#{'ab12' * 16}".freeze

  attr_accessor :token, :team_key, :key_version

  def initialize
    @token = TOKEN
    @secrets = []
    @scripts = []
    @mutex = Mutex.new
    @e2e = nil
  end

  # FakeApi#end_to_end! makes the team end-to-end: values are sealed under +team_key+ at
  # +key_version+, and the key is wrapped to +recipient+ (a raw X25519 public key). Returns the
  # token string with its key part for +private_key+.
  def end_to_end!(private_key, recipient, team_key: OpenSSL::Random.random_bytes(32), key_version: 1)
    @e2e = recipient
    @team_key = team_key
    @key_version = key_version
    @keys = { key_version => team_key } # every key version served, for the links (format 2)
    "#{@token}.#{E2ESeal.b64u(private_key)}.#{key_version}.#{E2ESeal.b64u(E2ESeal.commitment(team_key, TEAM_ID, key_version))}"
  end

  # FakeApi#forged_links maps a key version to the link served for it instead of the true one (the
  # key answer links every served version to its predecessor, as a re-keying member's client does).
  attr_accessor :forged_links

  # FakeApi#envelope is the stored secret +name+ of +environment+ sealed as the server would serve it.
  def envelope(name, environment = "production")
    secret = @secrets.find { |s| s["name"] == name && s["environment"] == environment }
    E2ESeal.seal(secret["value"], @team_key, @key_version, team_id: TEAM_ID, secret_id: secret["id"],
                                                            version: 1, environment: environment, name: name)
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

  # Paths take the team's id or its slug, as the server's do; any other team is a 404.
  def route(request)
    team = "(?:#{TEAM_ID}|#{TEAM_SLUG})"
    case request.path
    when %r{\A/api/v1/teams/#{team}/secrets/export\z}o then export(request.query)
    when %r{\A/api/v1/teams/#{team}/secrets/by-name/([^/]+)\z}o then by_name(URI::DEFAULT_PARSER.unescape(Regexp.last_match(1)), request.query)
    when %r{\A/api/v1/teams/#{team}/e2e/key\z}o then team_key_wrap
    else json(404, "error" => "tidak ditemukan")
    end
  end

  def by_name(name, query)
    environment = query["environment"] || "production"
    secret = @secrets.find { |s| s["name"] == name && s["environment"] == environment }
    return json(404, "error" => "secret tidak ditemukan") unless secret

    return json(200, "secret" => secret.slice("id", "name", "environment"), "value" => secret["value"]) unless @e2e

    json(200, "secret" => secret.slice("id", "name", "environment"), "value" => envelope(name, environment),
              "e2e" => true)
  end

  def team_key_wrap
    return json(400, "error" => "tim ini bukan end-to-end") unless @e2e

    @keys[@key_version] = @team_key
    links = @keys.keys.sort.filter_map do |version|
      next unless @keys.key?(version - 1)

      link = (@forged_links || {})[version] || E2ESeal.link(@keys[version], @keys[version - 1], TEAM_ID, version)
      { "key_version" => version, "link" => link }
    end
    json(200, "team_id" => TEAM_ID, "key_version" => @key_version,
              "wrapped_key" => E2ESeal.wrap(@team_key, TEAM_ID, @key_version, @e2e), "links" => links)
  end

  def export(query)
    chosen = @secrets.select { |s| query["environment"].nil? || s["environment"] == query["environment"] }
    return json(200, chosen.to_h { |s| [s["name"], s["value"]] }) unless @e2e

    json(200, chosen.to_h { |s| [s["name"], envelope(s["name"], s["environment"])] }, "Cvsm-E2E" => "1")
  end
end

# The helpers e2e_test.rb uses (CvsmTest includes them): a FakeApi behind a StubServer.
module FakeApiHelpers
  # Starts a FakeApi behind a StubServer, stopped after the test; returns [api, server].
  def start_api
    api = FakeApi.new
    server = StubServer.new { |request| api.call(request) }
    (@servers ||= []) << server
    [api, server]
  end

  # Builds a client against +server+ with the fake API's token and team slug.
  def client_for(server, **options)
    Cvsm::Client.new(token: FakeApi::TOKEN, base_url: server.base_url, team: FakeApi::TEAM_SLUG, **options)
  end

  def json(status, body, headers = {}) = FakeApi.json(status, body, headers)

  # The paths of the requests +server+ received, without the /api/v1 prefix.
  def paths(server) = server.log.map { |r| r.path.delete_prefix("/api/v1") }
end
