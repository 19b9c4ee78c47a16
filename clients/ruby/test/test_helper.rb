# frozen_string_literal: true

# Shared test support: StubApi, a launcher for conformance/stub.py (the stub API every SDK's tests
# share), a self-signed certificate for its HTTPS, and a base test class that isolates CVSM_* and
# proxy variables.
$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "fileutils"
require "json"
require "net/http"
require "openssl"
require "tmpdir"
require "minitest/autorun"
require "cvsm"

# StubApi runs conformance/stub.py (python3) on a free port of 127.0.0.1 until the tests end, and
# talks to it over HTTP: #reset its data, queue #faults, read back the #requests it answered.
class StubApi
  SCRIPT = File.expand_path("../../../conformance/stub.py", __dir__)
  TOKEN = "cvsm_#{'ab12' * 16}".freeze
  TEAM_ID = "0b9f4a8e-4c8d-4a53-9d58-0f1d2a3b4c5d"
  # The prefix of the paths of team "acme"'s secrets, for the faults' "path".
  SECRETS = "/api/v1/teams/acme/secrets"

  # The plain HTTP stub, started once per run.
  def self.shared = (@shared ||= new)

  # StubApi.new(cert_file, key_file) speaks HTTPS.
  def initialize(*tls)
    @tls = !tls.empty?
    dir = Dir.mktmpdir("cvsm-stub")
    port_file = File.join(dir, "port")
    pid = Process.spawn("python3", SCRIPT, port_file, *tls, out: File::NULL, err: File::NULL)
    Minitest.after_run do
      Process.kill("TERM", pid)
      Process.wait(pid)
      FileUtils.rm_rf(dir)
    end
    400.times { File.exist?(port_file) ? break : sleep(0.05) } # up to 20 s on a loaded machine
    @port = Integer(File.read(port_file))
  end

  def base_url = "#{@tls ? 'https' : 'http'}://127.0.0.1:#{@port}/api/v1"

  # Replaces the stub's data with team "acme" holding +secrets+ (name => production value, or the
  # stub's rows), and forgets faults and recorded requests; +e2e+: the team key answer of an
  # end-to-end team. Returns self.
  def reset(secrets = {}, token: TOKEN, e2e: nil)
    rows = secrets.is_a?(Array) ? secrets : secrets.each_with_index.map do |(name, value), i|
      { id: format("00000000-0000-4000-8000-%012d", i + 1), name: name, environment: "production", value: value }
    end
    post("reset", token: token, teams: [{ id: TEAM_ID, slug: "acme" }], secrets: rows, e2e: e2e)
    self
  end

  # Queues +faults+ (conformance/stub.py's docstring: "path" prefix, "count", "status", "drop"...).
  def faults(*faults) = post("faults", faults)

  # The API requests answered since the reset: [{"method", "path", "query", "headers", "proxied", "host"}].
  def requests = JSON.parse(http { |h| h.get("/_stub/requests") }.body)

  # Their paths, without /api/v1.
  def paths = requests.map { |r| r["path"].delete_prefix("/api/v1") }

  # Queues change-stream items (conformance/stub.py: {"name", "value"[, "id"]}, {"close": true}...).
  def changes(*items) = post("changes", items)

  # {"open" => streams open now, "closed" => streams ended since the reset}.
  def streams = JSON.parse(http { |h| h.get("/_stub/streams") }.body)

  private

  def post(what, body) = http { |h| h.post("/_stub/#{what}", JSON.generate(body), "Content-Type" => "application/json") }

  def http(&block)
    http = Net::HTTP.new("127.0.0.1", @port, nil) # nil: never through a proxy of the environment
    http.use_ssl = @tls
    http.ca_file = TestPki.ca_file if @tls
    http.start(&block)
  end
end

# CvsmTest is the base class of the SDK's tests: it removes every CVSM_* and proxy variable for the
# test and restores the environment afterwards.
class CvsmTest < Minitest::Test
  TOKEN = StubApi::TOKEN

  PROXY_VARIABLES = %w[http_proxy HTTP_PROXY https_proxy HTTPS_PROXY no_proxy NO_PROXY].freeze

  def setup
    @saved_env = ENV.to_h
    ENV.keys.grep(/\ACVSM_/).each { |name| ENV.delete(name) }
    PROXY_VARIABLES.each { |name| ENV.delete(name) }
  end

  def teardown
    ENV.replace(@saved_env)
  end

  # The shared stub, reset to hold +secrets+ (name => production value).
  def stub_api(secrets = {}) = StubApi.shared.reset(secrets)

  # A client of the shared stub's team "acme".
  def stub_client(**options)
    Cvsm::Client.new(token: TOKEN, base_url: StubApi.shared.base_url, team: "acme", **options)
  end
end

# TestPki writes a self-signed certificate for 127.0.0.1 (its own CA: the ca_file) and its key as
# PEM files, once per run.
module TestPki
  module_function

  def ca_file = files[0]
  def key_file = files[1]

  def files
    @files ||= begin
      dir = Dir.mktmpdir("cvsm-pki")
      Minitest.after_run { FileUtils.rm_rf(dir) }
      key = OpenSSL::PKey::EC.generate("prime256v1")
      cert = OpenSSL::X509::Certificate.new
      cert.version = 2
      cert.serial = rand(1 << 64)
      cert.subject = cert.issuer = OpenSSL::X509::Name.parse("/CN=cvsm test 127.0.0.1")
      cert.public_key = key
      cert.not_before = Time.now - 60
      cert.not_after = Time.now + 3600
      ext = OpenSSL::X509::ExtensionFactory.new(cert, cert)
      cert.add_extension(ext.create_extension("basicConstraints", "CA:TRUE", true))
      cert.add_extension(ext.create_extension("subjectAltName", "IP:127.0.0.1"))
      cert.sign(key, OpenSSL::Digest.new("SHA256"))
      { "ca.pem" => cert.to_pem, "key.pem" => key.private_to_pem }.map do |name, pem|
        File.join(dir, name).tap { |path| File.write(path, pem) }
      end
    end
  end
end
