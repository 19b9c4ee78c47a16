# frozen_string_literal: true

require "base64"
require_relative "test_helper"

# R7 and the transport seam: a private CA through ca_file or CVSM_CA_FILE, proxies from the
# environment read when the client is built, and the http_factory.
class TransportTest < CvsmTest
  # A stub over HTTPS, its certificate the test CA's, started once per run.
  def self.tls_stub = (@tls_stub ||= StubApi.new(TestPki.ca_file, TestPki.key_file))

  # Trust through ca_file or CVSM_CA_FILE, and only then, is the conformance case
  # private_ca_trusted_through_ca_file; proxy variables are proxy_from_environment and
  # proxy_variable_forms.

  def test_proxy_variables_are_read_when_the_client_is_built
    stub_api("A" => "direct")
    client = stub_client
    ENV["http_proxy"] = "http://127.0.0.1:9" # nothing listens
    assert_equal "direct", client.get("A")
    assert_raises(Cvsm::NetworkError) { stub_client(max_retries: 0).get("A") }
  end

  def test_proxy_choice_by_scheme_and_no_proxy
    https = URI("https://vault.example.com/api/v1")
    http = URI("http://vault.example.com:8080/api/v1")
    proxy = ->(uri, env) { Cvsm::Proxy.for(uri, env)&.to_s }
    assert_nil proxy.call(https, "http_proxy" => "http://p:1")
    assert_equal "http://s:2", proxy.call(https, "http_proxy" => "http://p:1", "https_proxy" => "http://s:2")
    assert_equal "http://s:3", proxy.call(https, "HTTPS_PROXY" => "http://s:3")
    assert_equal "http://s:2", proxy.call(https, "https_proxy" => "http://s:2", "HTTPS_PROXY" => "http://s:3")
    assert_equal "http://s:3", proxy.call(https, "https_proxy" => "", "HTTPS_PROXY" => "http://s:3")
    assert_equal "http://p:1", proxy.call(http, "http_proxy" => "http://p:1", "https_proxy" => "http://s:2")
    assert_equal "http://p:1", proxy.call(http, "HTTP_PROXY" => "p:1")
    {
      "example.com" => nil, ".example.com" => nil, "vault.example.com" => nil, "*" => nil,
      "other.com, example.com" => nil, "example.com:8080" => nil, "example.com:9090" => "http://p:1",
      "ample.com" => "http://p:1", "other.com" => "http://p:1", "" => "http://p:1"
    }.each do |no_proxy, expected|
      got = proxy.call(http, "http_proxy" => "http://p:1", "no_proxy" => no_proxy)
      expected ? assert_equal(expected, got, no_proxy) : assert_nil(got, no_proxy)
    end
    assert_nil proxy.call(URI("http://[::1]:80/"), "http_proxy" => "http://p:1", "NO_PROXY" => "::1")
    assert_nil proxy.call(URI("http://10.1.2.3/"), "http_proxy" => "http://p:1", "no_proxy" => "10.0.0.0/8")
  end

  def test_an_unusable_proxy_url_is_a_configuration_error_that_hides_it
    {
      "https_proxy" => ["socks5://user:hunter2@p:1080", "https://vault.example.com/api/v1"],
      "http_proxy" => ["http://user:hunter2@[bad", "http://vault.example.com/api/v1"]
    }.each do |name, (value, base_url)|
      ENV[name] = value
      error = assert_raises(Cvsm::ConfigurationError) { Cvsm::Client.new(token: TOKEN, base_url: base_url, team: "acme") }
      assert_includes error.message, name
      refute_includes error.message, "hunter2"
      ENV.delete(name)
    end
  end

  def test_http_factory_builds_each_connection_and_the_client_still_sets_its_limits
    stub_api("A" => "1")
    built = []
    factory = lambda do |uri|
      Net::HTTP.new(uri.hostname, uri.port, nil).tap do |http|
        http.read_timeout = 999
        http.max_retries = 5
        built << [uri.path, http]
      end
    end
    client = stub_client(http_factory: factory, timeout: 3)
    assert_equal "1", client.get("A")
    assert_raises(Cvsm::SecretNotFoundError) { client.get("B") }
    assert_equal ["/api/v1/teams/acme/secrets/by-name/A", "/api/v1/teams/acme/secrets/by-name/B",
                  "/api/v1/teams/acme/secrets"],
                 built.map(&:first)
    built.each do |_, http|
      assert_equal 0, http.max_retries
      assert_operator http.read_timeout, :<=, 3
      assert_operator http.open_timeout, :<=, 3
    end
  end

  def test_http_factory_with_ca_file_gets_the_private_ca
    stub = self.class.tls_stub.reset({ "A" => "over tls" })
    factory = ->(uri) { Net::HTTP.new(uri.hostname, uri.port, nil) }
    client = Cvsm::Client.new(token: TOKEN, base_url: stub.base_url, team: "acme", http_factory: factory,
                              ca_file: TestPki.ca_file)
    assert_equal "over tls", client.get("A")
  end
end
