# frozen_string_literal: true

require "pp"
require "stringio"
require "yaml"
require_relative "test_helper"

# End-to-end teams: the cross-language vectors of conformance/vectors/e2e.json, then the client
# against a fake end-to-end team (the key fetched once, values opened, the decryption error).
class E2ETest < CvsmTest
  VECTORS_FILE = File.expand_path("../../../conformance/vectors/e2e.json", __dir__)
  VALUE = "postgres://app:s3cr3t@db.internal/app"

  def vectors = (@vectors ||= JSON.parse(File.read(VECTORS_FILE)))

  def unb64u(text) = (text.tr("-_", "+/") + ("=" * (-text.length % 4))).unpack1("m0")

  # --- the vectors, read from the repository at test time -------------------------------------

  def test_every_recipient_of_the_vectors_unwraps_the_team_key
    assert_equal 2, vectors["recipients"].size
    vectors["recipients"].each do |recipient|
      private_key = unb64u(recipient["private_key"])
      team_key = Cvsm::E2E.unwrap_team_key(recipient["wrapped_key"], team_id: vectors["team_id"],
                                                                      key_version: vectors["key_version"],
                                                                      private_key: private_key)
      assert_equal unb64u(vectors["team_key"]), team_key, recipient["what"]
      assert_equal unb64u(recipient["public_key"]),
                   Cvsm::E2E.public_key_of(Cvsm::E2E.x25519_private(private_key)), recipient["what"]
    end
  end

  def test_a_wrap_opens_only_for_its_team_version_and_recipient
    member, token = vectors["recipients"]
    {
      "another team" => { team_id: FakeApi::TEAM_ID, key_version: vectors["key_version"],
                          private_key: unb64u(member["private_key"]) },
      "another key version" => { team_id: vectors["team_id"], key_version: vectors["key_version"] + 1,
                                 private_key: unb64u(member["private_key"]) },
      "another recipient's key" => { team_id: vectors["team_id"], key_version: vectors["key_version"],
                                     private_key: unb64u(token["private_key"]) }
    }.each do |why, arguments|
      error = assert_raises(Cvsm::DecryptionError, why) { Cvsm::E2E.unwrap_team_key(member["wrapped_key"], **arguments) }
      refute_includes error.message, member["private_key"]
    end
    ["cvsm-wrap1.AA.AA.AA", "cvsm-wrap2.#{member['wrapped_key'].split('.', 2).last}", "", nil].each do |wrapped|
      assert_raises(Cvsm::DecryptionError, wrapped.inspect) do
        Cvsm::E2E.unwrap_team_key(wrapped, team_id: vectors["team_id"], key_version: vectors["key_version"],
                                           private_key: unb64u(member["private_key"]))
      end
    end
  end

  def test_a_low_order_ephemeral_key_is_refused
    _eph, nonce, ct = vectors.dig("recipients", 0, "wrapped_key").delete_prefix("cvsm-wrap1.").split(".")
    zero = E2ESeal.b64u("\0" * 32)
    error = assert_raises(Cvsm::DecryptionError) do
      Cvsm::E2E.unwrap_team_key("cvsm-wrap1.#{zero}.#{nonce}.#{ct}", team_id: vectors["team_id"],
                                                                      key_version: vectors["key_version"],
                                                                      private_key: unb64u(vectors.dig("recipients", 0, "private_key")))
    end
    assert_includes error.message, "low order"
  end

  def test_every_sealed_value_of_the_vectors_opens_or_is_a_decryption_error
    team_key = unb64u(vectors["team_key"])
    assert_operator vectors["values"].count { |entry| entry["opens"] }, :>=, 4
    assert_operator vectors["values"].count { |entry| !entry["opens"] }, :>=, 4
    vectors["values"].each do |entry|
      open = lambda do
        Cvsm::E2E.open_value(entry["envelope"], team_key, team_id: vectors["team_id"],
                                                          environment: entry["environment"], name: entry["name"])
      end
      if entry["opens"]
        value = open.call
        assert_equal entry["value"], value, entry["envelope"]
        assert_equal Encoding::UTF_8, value.encoding
      else
        error = assert_raises(Cvsm::DecryptionError, entry["why"], &open)
        assert_includes error.message, entry["name"].inspect, entry["why"]
        assert_nil error.status
        vectors["values"].select { |v| v["opens"] }.each { |v| refute_includes error.message, v["value"] }
        refute_includes error.message, vectors["team_key"]
      end
    end
  end

  def test_the_vectors_token_splits_into_its_api_token_key_and_pin
    token = vectors["token"]
    assert_equal [token["api_token"], unb64u(token["private_key"]), token["key_version"], unb64u(token["commitment"])],
                 Cvsm::E2E.split_token(token["token"])
    assert_equal [TOKEN, nil, nil, nil], Cvsm::E2E.split_token(TOKEN)
  end

  def test_the_vectors_commitments_and_links
    chain = vectors["chain"]
    chain["keys"].each do |entry|
      assert_equal unb64u(entry["commitment"]),
                   Cvsm::E2E.commitment(unb64u(entry["team_key"]), chain["team_id"], entry["key_version"])
    end
    keys = chain["keys"].to_h { |entry| [entry["key_version"], unb64u(entry["team_key"])] }
    chain["links"].each do |entry|
      assert_equal unb64u(entry["opens_to"]),
                   Cvsm::E2E.open_link(entry["link"], keys.fetch(entry["key_version"]), chain["team_id"], entry["key_version"])
    end
    assert_equal 4, chain["bad_links"].size
    chain["bad_links"].each do |entry|
      error = assert_raises(Cvsm::DecryptionError, entry["why"]) do
        Cvsm::E2E.open_link(entry["link"], unb64u(entry["key"]), chain["team_id"], entry["key_version"])
      end
      refute_includes error.message, entry["key"]
    end
  end

  # Each pin of the vectors: the key answer unwrapped with the token's key and checked against its
  # pin, as the client does; "integrity" is a DecryptionError.
  def test_each_token_pin_of_the_vectors_verifies_or_is_a_decryption_error
    assert_operator vectors["token_pins"].count { |entry| entry["outcome"] == "ok" }, :>=, 3
    assert_operator vectors["token_pins"].count { |entry| entry["outcome"] == "integrity" }, :>=, 6
    keys = vectors.dig("chain", "keys").to_h { |entry| [entry["key_version"], unb64u(entry["team_key"])] }
    vectors["token_pins"].each do |entry|
      _api, private_key, pin_version, pin_commitment = Cvsm::E2E.split_token(entry["token"])
      answer = entry["key_answer"]
      verify = lambda do
        key = Cvsm::E2E.unwrap_team_key(answer["wrapped_key"], team_id: answer["team_id"],
                                                               key_version: answer["key_version"], private_key: private_key)
        links = answer["links"].to_h { |link| [link["key_version"], link["link"]] }
        Cvsm::E2E.verify_chain(key, answer["key_version"], answer["team_id"], links, pin_version, pin_commitment)
      end
      if entry["outcome"] == "ok"
        verified = verify.call
        assert_equal keys.select { |version, _| version >= pin_version }, verified, entry["why"]
      else
        assert_equal "integrity", entry["outcome"]
        error = assert_raises(Cvsm::DecryptionError, entry["why"], &verify)
        keys.each_value { |key| refute_includes error.message, E2ESeal.b64u(key) }
      end
    end
  end

  def test_a_chain_is_walked_below_the_pin_on_request
    chain = vectors["chain"]
    keys = chain["keys"].to_h { |entry| [entry["key_version"], unb64u(entry["team_key"])] }
    links = chain["links"].to_h { |entry| [entry["key_version"], entry["link"]] }
    three = chain["keys"].find { |entry| entry["key_version"] == 3 }
    assert_equal keys, Cvsm::E2E.verify_chain(keys[3], 3, chain["team_id"], links, 3, unb64u(three["commitment"]), down_to: 1)
  end

  def test_each_bad_token_of_the_vectors_is_a_configuration_error_that_does_not_show_it
    assert_equal 7, vectors["bad_tokens"].size
    vectors["bad_tokens"].each do |bad|
      [-> { Cvsm::Client.new(token: bad, base_url: "http://h/api/v1", team: "acme") },
       lambda do
         ENV["CVSM_TOKEN"] = bad
         Cvsm::Client.new(base_url: "http://h/api/v1", team: "acme")
       end].each do |build|
        error = assert_raises(Cvsm::ConfigurationError, bad, &build)
        assert_includes error.message, "key part"
        bad.split(".").reject { |part| part.size < 4 }.each { |part| refute_includes error.message, part }
      end
    end
  end

  def test_a_jwt_is_not_taken_for_a_token_with_a_key
    api, server = start_api
    api.token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJl"
    api.add_secret("A", "1")
    client = Cvsm::Client.new(token: api.token, base_url: server.base_url, team: "acme")
    assert_equal "1", client.get("A")
    assert_equal "Bearer #{api.token}", server.log.first.headers["authorization"]
  end

  # --- the client against an end-to-end team ----------------------------------------------------

  def setup
    super
    @api, @server = start_api
    @api.add_secret("DATABASE_URL", VALUE)
    @api.add_secret("API_KEY", "kunci rahasia — café 🔑")
    @api.add_secret("EMPTY", "")
    @api.add_secret("DATABASE_URL", "postgres://staging", environment: "staging")
    @private_key, @public_key = E2ESeal.key_pair
    @token = @api.end_to_end!(@private_key, @public_key)
    @key_part = E2ESeal.b64u(@private_key)
  end

  def e2e_client(**options)
    Cvsm::Client.new(token: @token, base_url: @server.base_url, team: "acme", **options)
  end

  def key_path = "/teams/acme/e2e/key"

  def tampered(envelope)
    last = envelope[-1] == "A" ? "B" : "A"
    envelope[0..-2] + last
  end

  def test_concurrent_first_reads_fetch_the_team_key_once
    8.times { |i| @api.add_secret("S#{i}", "v#{i}") }
    client = e2e_client
    assert_equal Array.new(8) { |i| "v#{i}" }, Array.new(8) { |i| Thread.new { client.get("S#{i}") } }.map(&:value)
    assert_equal 1, paths(@server).count(key_path)
  end

  def test_an_empty_end_to_end_environment_needs_no_key
    assert_equal({}, e2e_client(environment: "development").get_all)
    assert_equal ["/teams/acme/secrets/export"], paths(@server)
  end

  def test_a_new_key_version_is_fetched_once_then_a_version_that_still_differs_does_not_open
    client = e2e_client
    client.get("DATABASE_URL")
    @api.team_key = OpenSSL::Random.random_bytes(32) # the team was re-keyed: version 2
    @api.key_version = 2
    assert_equal "kunci rahasia — café 🔑", client.get("API_KEY")
    assert_equal ["/teams/acme/secrets/by-name/API_KEY", key_path], paths(@server).last(2)
    assert_equal "", client.get("EMPTY")
    assert_equal 5, @server.log.size

    sealed = @api.envelope("DATABASE_URL").sub("cvsm-e2e1.2.", "cvsm-e2e1.3.")
    @api.script(%r{/by-name/}, json(200, "secret" => { "id" => "x", "name" => "DATABASE_URL" }, "value" => sealed,
                                         "e2e" => true))
    client.clear_cache
    error = assert_raises(Cvsm::DecryptionError) { client.get("DATABASE_URL") }
    assert_includes error.message, "key version 3"
    assert_equal ["/teams/acme/secrets/by-name/DATABASE_URL", key_path], paths(@server).last(2)
  end

  def test_a_team_key_below_the_pin_or_with_a_forged_link_is_a_decryption_error
    @api.key_version = 2
    @token = @api.end_to_end!(@private_key, @public_key, key_version: 2)
    @api.key_version = 1
    assert_includes assert_raises(Cvsm::DecryptionError) { e2e_client.get("DATABASE_URL") }.message,
                    "below the token's pinned version 2"

    @token = @api.end_to_end!(@private_key, @public_key)
    assert_equal VALUE, e2e_client.get("DATABASE_URL")
    @api.team_key = OpenSSL::Random.random_bytes(32) # re-keyed by the server alone: no holder's link
    @api.key_version = 2
    @api.forged_links = { 2 => E2ESeal.link(@api.team_key, OpenSSL::Random.random_bytes(32), FakeApi::TEAM_ID, 2) }
    assert_includes assert_raises(Cvsm::DecryptionError) { e2e_client.get("API_KEY") }.message, "pinned commitment"
  end

  def test_a_value_of_an_older_key_version_opens_through_the_verified_links
    old = @api.envelope("DATABASE_URL")
    client = e2e_client
    @api.script(%r{/by-name/}, json(200, "secret" => { "id" => "x", "name" => "DATABASE_URL" }, "value" => old,
                                         "e2e" => true))
    assert_equal VALUE, client.get("DATABASE_URL")
    client.clear_cache
    first = @api.team_key
    @api.team_key = OpenSSL::Random.random_bytes(32) # re-keyed: version 2, with its link to version 1
    @api.key_version = 2
    @api.script(%r{/by-name/}, json(200, "secret" => { "id" => "x", "name" => "DATABASE_URL" }, "value" => old,
                                         "e2e" => true))
    assert_equal VALUE, client.get("DATABASE_URL"), "sealed under version 1, opened with the key the link gave"
    assert_equal "kunci rahasia — café 🔑", client.get("API_KEY"), "sealed under version 2"
    held = client.instance_variable_get(:@team_key)
    assert_equal 2, held.key_version
    assert_equal first, held.key(1)
  end

  def test_a_wrap_that_does_not_open_with_the_tokens_key_is_a_decryption_error
    _other_private, other_public = E2ESeal.key_pair
    @api.end_to_end!(@private_key, other_public, team_key: @api.team_key)
    error = assert_raises(Cvsm::DecryptionError) { e2e_client.get("DATABASE_URL") }
    assert_includes error.message, "team key"
    assert_equal "req-2", error.request_id, "the key answer's"
    refute_includes error.message, @key_part
  end

  def test_an_export_without_the_header_gives_a_token_without_its_key_part_the_values_as_before
    @api.script(%r{/export\z}, json(200, "DATABASE_URL" => VALUE), json(200, "DATABASE_URL" => VALUE))
    assert_equal({ "DATABASE_URL" => VALUE }, client_for(@server).get_all)
    ENV.delete("DATABASE_URL")
    assert_equal ["DATABASE_URL"], client_for(@server).inject
    assert_equal VALUE, ENV.fetch("DATABASE_URL")
  end

  def test_a_plain_answer_to_a_token_with_a_key_is_not_taken_as_the_value
    @api.script(%r{/by-name/}, json(200, "secret" => { "id" => "x", "name" => "DATABASE_URL" }, "value" => "clear"))
    @api.script(%r{/export\z}, json(200, "DATABASE_URL" => "clear"))
    client = e2e_client
    assert_includes assert_raises(Cvsm::DecryptionError) { client.get("DATABASE_URL") }.message, "not a sealed value"
    assert_raises(Cvsm::DecryptionError) { client.get_all }
    refute_includes paths(@server), key_path
  end

  def test_the_key_request_fails_with_the_usual_typed_errors
    {
      [403, "akses ditolak"] => Cvsm::PermissionDeniedError,
      [401, "token tidak valid"] => Cvsm::AuthenticationError,
      [404, "tim tidak ditemukan"] => Cvsm::ConfigurationError,
      [400, "tim ini bukan end-to-end"] => Cvsm::ConfigurationError,
      [429, "pelan"] => Cvsm::RateLimitError
    }.each do |(status, text), error_class|
      @api.script(%r{/e2e/key\z}, json(status, "error" => text))
      error = assert_raises(error_class, status.to_s) { e2e_client.get("DATABASE_URL") }
      assert_equal status, error.status
    end
    @api.script(%r{/e2e/key\z}, json(200, "team_id" => FakeApi::TEAM_ID), json(503, {}))
    assert_raises(Cvsm::NetworkError, "an unreadable answer, retried") { e2e_client(max_retries: 0).get("DATABASE_URL") }
    assert_equal VALUE, e2e_client(max_retries: 1).get("DATABASE_URL"), "a 503 is retried"
  end

  def test_a_permission_error_forgets_the_team_key_and_the_values
    client = e2e_client
    client.get("DATABASE_URL")
    @api.script(%r{/by-name/}, json(403, "error" => "akses ditolak"))
    assert_raises(Cvsm::PermissionDeniedError) { client.get("API_KEY") }
    assert_equal VALUE, client.get("DATABASE_URL")
    assert_equal ["/teams/acme/secrets/by-name/DATABASE_URL", key_path], paths(@server).last(2)
  end

  def test_the_key_part_and_the_team_key_are_never_printed_or_serialised
    client = e2e_client
    client.get("DATABASE_URL")
    client.get_all
    out = StringIO.new
    PP.pp(client, out)
    secrets = [@key_part, @token, VALUE, E2ESeal.b64u(@api.team_key), @private_key, @api.team_key]
    shown = [client.inspect, client.to_s, out.string, client.to_yaml, client.to_json, client.config.to_s]
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
    (shown + seen).each do |text|
      secrets.each { |secret| refute_includes text.b, secret.b }
    end
    team_key = client.instance_variable_get(:@team_key)
    assert_equal 1, team_key.key_version
    assert_raises(TypeError) { Marshal.dump(team_key) }
    assert_raises(TypeError) { Marshal.dump(client) }
  end
end
