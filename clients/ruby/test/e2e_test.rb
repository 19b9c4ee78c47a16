# frozen_string_literal: true

require "pp"
require "stringio"
require "yaml"
require_relative "test_helper"

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

# End-to-end teams: the cross-language vectors of conformance/vectors/e2e.json, then the client
# against the shared stub holding an end-to-end team sealed here (concurrent first reads,
# secrecy); its wire rules are the conformance cases e2e_*.
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
      "another team" => { team_id: StubApi::TEAM_ID, key_version: vectors["key_version"],
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
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJl"
    StubApi.shared.reset({ "A" => "1" }, token: jwt)
    client = Cvsm::Client.new(token: jwt, base_url: StubApi.shared.base_url, team: "acme")
    assert_equal "1", client.get("A")
    assert_equal "Bearer #{jwt}", StubApi.shared.requests.first["headers"]["authorization"]
  end

  # --- the client against an end-to-end team ----------------------------------------------------

  def setup
    super
    @private_key, @public_key = E2ESeal.key_pair
    @team_key = OpenSSL::Random.random_bytes(32)
    @key_part = E2ESeal.b64u(@private_key)
    commitment = E2ESeal.b64u(E2ESeal.commitment(@team_key, StubApi::TEAM_ID, 1))
    @token = "#{TOKEN}.#{@key_part}.1.#{commitment}" # pinned to key version 1
    @secrets = [["DATABASE_URL", VALUE], ["API_KEY", "kunci rahasia — café 🔑"], ["EMPTY", ""],
                ["DATABASE_URL", "postgres://staging", "staging"]]
    load_team
  end

  # Resets the shared stub to team "acme" made end-to-end: @secrets ([name, value, environment])
  # sealed under @team_key (key version 1), the key wrapped to @public_key.
  def load_team
    rows = @secrets.each_with_index.map do |(name, value, environment), i|
      id = format("00000000-0000-4000-8000-%012d", i + 1)
      environment ||= "production"
      { id: id, name: name, environment: environment,
        value: E2ESeal.seal(value, @team_key, 1, team_id: StubApi::TEAM_ID, secret_id: id, version: 1,
                                                 environment: environment, name: name) }
    end
    StubApi.shared.reset(rows, e2e: { team_id: StubApi::TEAM_ID, key_version: 1, links: [],
                                      wrapped_key: E2ESeal.wrap(@team_key, StubApi::TEAM_ID, 1, @public_key) })
  end

  def e2e_client(**options)
    Cvsm::Client.new(token: @token, base_url: StubApi.shared.base_url, team: "acme", **options)
  end

  def key_path = "/teams/acme/e2e/key"

  def test_concurrent_first_reads_fetch_the_team_key_once
    8.times { |i| @secrets << ["S#{i}", "v#{i}"] }
    load_team
    client = e2e_client
    assert_equal Array.new(8) { |i| "v#{i}" }, Array.new(8) { |i| Thread.new { client.get("S#{i}") } }.map(&:value)
    assert_equal 1, StubApi.shared.paths.count(key_path)
  end

  def test_the_key_part_and_the_team_key_are_never_printed_or_serialised
    client = e2e_client
    client.get("DATABASE_URL")
    client.get_all
    out = StringIO.new
    PP.pp(client, out)
    secrets = [@key_part, @token, VALUE, E2ESeal.b64u(@team_key), @private_key, @team_key]
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
