# frozen_string_literal: true

require "pp"
require "stringio"
require "yaml"
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

  def test_configuration_and_transport_inspect_hide_the_token
    config = Cvsm::Configuration.new(token: TOKEN, base_url: "http://h/api/v1", team: "acme")
    refute_includes config.inspect, TOKEN
    refute_includes config.to_h.to_s, TOKEN
    refute_includes Cvsm::Transport.new(config).inspect, TOKEN
  end
  # R12: serialising a client shows neither the token nor a value.
  def used_client
    api, server = start_api
    api.add_secret("A", VALUE)
    client = client_for(server)
    client.get("A")
    client.get_all
    client
  end

  def test_to_yaml_shows_the_configuration_but_no_token_or_value
    client = used_client
    yaml = client.to_yaml
    refute_includes yaml, TOKEN
    refute_includes yaml, VALUE
    assert_includes yaml, "team: acme"
    assert_includes yaml, "cache_ttl: 30"
    assert_raises(TypeError) { YAML.unsafe_load(yaml) }
    [client.instance_variable_get(:@config), client.instance_variable_get(:@cache),
     client.instance_variable_get(:@transport)].each do |part|
      refute_includes part.to_yaml, TOKEN
      refute_includes part.to_yaml, VALUE
    end
  end

  def test_json_shows_the_configuration_but_no_token_or_value
    client = used_client
    [JSON.generate(client), client.to_json, JSON.generate("client" => client), client.as_json.to_s].each do |json|
      refute_includes json, TOKEN
      refute_includes json, VALUE
      assert_includes json, "acme"
    end
  end

  def test_marshal_refuses_and_writes_nothing
    client = used_client
    out = StringIO.new
    assert_raises(TypeError) { Marshal.dump(client, out) }
    refute_includes out.string, TOKEN
    refute_includes out.string, VALUE
    [client.instance_variable_get(:@config), client.instance_variable_get(:@cache)].each do |part|
      assert_raises(TypeError) { Marshal.dump(part) }
    end
  end

  def test_no_instance_variable_prints_the_token_or_a_value
    client = used_client
    seen = []
    walk = lambda do |object, depth|
      next if depth > 3

      object.instance_variables.each do |name|
        part = object.instance_variable_get(name)
        seen << part.inspect << part.to_s
        seen << part.to_yaml unless part.is_a?(Thread::Mutex) || part.is_a?(Proc) || part.is_a?(Random)
        walk.call(part, depth + 1) unless part.is_a?(String)
      end
    end
    walk.call(client, 0)
    seen.each do |text|
      refute_includes text, TOKEN
      refute_includes text, VALUE
    end
  end

  # One implementation: the printing and serialising rules live in Cvsm::Redaction alone, so a
  # fix there (a new serialiser to refuse) reaches every object that holds a token or a value.
  def test_every_holder_of_a_token_or_value_prints_through_one_redaction_module
    [Cvsm::Client, Cvsm::Configuration, Cvsm::Transport, Cvsm::Cache].each do |holder|
      assert_includes holder.ancestors, Cvsm::Redaction::Settings, holder.name
    end
    lib = File.expand_path("../lib", __dir__)
    copies = Dir.glob("**/*.rb", base: lib).reject { |f| f == "cvsm/redaction.rb" }.select do |file|
      File.read(File.join(lib, file)).match?(/def (encode_with|as_json|to_json|marshal_dump)\b/)
    end
    assert_empty copies, "serialising rules written outside lib/cvsm/redaction.rb"
  end
end
