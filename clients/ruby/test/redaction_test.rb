# frozen_string_literal: true

require "pp"
require "stringio"
require "yaml"
require_relative "test_helper"

# No token or secret value in the printed or serialised client. That nothing printed holds them is
# also the conformance case describe_holds_no_token_or_value, and e2e_test.rb walks every
# instance variable of a used client; here what each Ruby form shows, and what it refuses.
class RedactionTest < CvsmTest
  VALUE = "super-secret-value-42"

  # A client that has read VALUE by name and through get_all.
  def used_client
    stub_api("A" => VALUE)
    stub_client.tap do |client|
      client.get("A")
      client.get_all
    end
  end

  def test_printed_and_serialised_forms_show_the_configuration_but_no_token_or_value
    client = used_client
    out = StringIO.new
    PP.pp(client, out)
    { client.inspect => 'team="acme"', client.to_s => "cache_ttl=30", out.string => "cache_ttl=30",
      client.to_yaml => "team: acme", JSON.generate("client" => client) => '"team":"acme"',
      client.as_json.to_s => "acme" }.each do |text, shown|
      assert_includes text, shown
      refute_includes text, TOKEN
      refute_includes text, VALUE
    end
    assert_raises(TypeError) { YAML.unsafe_load(client.to_yaml) }
  end

  def test_base_url_credentials_are_not_printed
    client = Cvsm::Client.new(token: TOKEN, base_url: "https://user:pa55@vault.example.com/api/v1", team: "acme")
    refute_includes client.inspect, "pa55"
    # The form every SDK prints: the whole user:password part as ***.
    assert_includes client.inspect, "https://***@vault.example.com/api/v1"
    refute_includes client.instance_variable_get(:@config).inspect, "pa55"
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
