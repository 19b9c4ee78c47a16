# frozen_string_literal: true

require "pp"
require "stringio"
require_relative "test_helper"

# No token or secret value in the printed client or in any error message.
class RedactionTest < CvsmTest
  VALUE = "super-secret-value-42"

  def test_inspect_to_s_and_pp_show_the_configuration_but_no_token_or_value
    api, server = start_api
    api.add_secret("A", VALUE)
    client = client_for(server)
    client.get("A")
    client.get_all
    out = StringIO.new
    PP.pp(client, out)
    [client.inspect, client.to_s, out.string, "#{client}"].each do |text|
      refute_includes text, TOKEN
      refute_includes text, VALUE
      assert_includes text, "team=\"acme\""
      assert_includes text, "cache_ttl=30"
    end
  end

  def test_base_url_credentials_are_not_printed
    client = Cvsm::Client.new(token: TOKEN, base_url: "https://user:pa55@vault.example.com/api/v1", team: "acme")
    refute_includes client.inspect, "pa55"
    assert_includes client.inspect, "https://vault.example.com/api/v1"
  end

  def test_error_messages_never_contain_the_token_even_when_the_server_echoes_it
    api, server = start_api
    api.script(%r{/secrets\z}, json(500, "error" => "bad header Bearer #{TOKEN}"))
    error = assert_raises(Cvsm::ApiError) { client_for(server).get("A") }
    refute_includes error.message, TOKEN
    refute_includes error.inspect, TOKEN
    assert_includes error.message, "[REDACTED]"
  end

  def test_network_and_not_found_errors_carry_no_token_or_value
    api, server = start_api
    api.add_secret("a", VALUE)
    not_found = assert_raises(Cvsm::SecretNotFoundError) { client_for(server).get("A") }
    network = assert_raises(Cvsm::NetworkError) do
      Cvsm::Client.new(token: TOKEN, base_url: "http://127.0.0.1:#{closed_port}/api/v1", team: "acme").get("A")
    end
    [not_found, network].each do |error|
      refute_includes error.message, TOKEN
      refute_includes error.message, VALUE
    end
  end

  def test_configuration_and_transport_inspect_hide_the_token
    config = Cvsm::Configuration.new(token: TOKEN, base_url: "http://h/api/v1", team: "acme")
    refute_includes config.inspect, TOKEN
    refute_includes config.to_h.to_s, TOKEN
    refute_includes Cvsm::Transport.new(config).inspect, TOKEN
  end
end
