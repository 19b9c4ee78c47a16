# frozen_string_literal: true

# What e2e_test.rb runs against: FakeApi, a team on conformance/stub.py that #end_to_end! makes
# end-to-end (the values sealed and the team key wrapped here: stub.py serves what it is given),
# and the sealing half of docs/e2e.md (E2ESeal).

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

# FakeApi holds a team's secrets and loads them into the shared stub (StubApi) at each change: as
# they are, or after #end_to_end! sealed under a team key wrapped to the token's public key (the
# stub then marks the reads by name "e2e": true and the JSON export Cvsm-E2E: 1, and serves the
# key at GET /teams/{team}/e2e/key).
class FakeApi
  TEAM_ID = StubApi::TEAM_ID

  attr_reader :token, :team_key

  def initialize
    @token = StubApi::TOKEN
    @secrets = []
    load
  end

  def token=(token)
    @token = token
    load
  end

  # FakeApi#add_secret stores a secret.
  def add_secret(name, value, environment: "production")
    @secrets << { id: format("00000000-0000-4000-8000-%012d", @secrets.size + 1), name: name,
                  environment: environment, value: value }
    load
  end

  # FakeApi#end_to_end! makes the team end-to-end: values are sealed under +team_key+ at
  # +key_version+, and the key is wrapped to +recipient+ (a raw X25519 public key). Returns the
  # token string with its key part for +private_key+.
  def end_to_end!(private_key, recipient, team_key: OpenSSL::Random.random_bytes(32), key_version: 1)
    @recipient = recipient
    @team_key = team_key
    @key_version = key_version
    load
    "#{@token}.#{E2ESeal.b64u(private_key)}.#{key_version}.#{E2ESeal.b64u(E2ESeal.commitment(team_key, TEAM_ID, key_version))}"
  end

  private

  def load
    return StubApi.shared.reset(@secrets, token: @token) unless @recipient

    sealed = @secrets.map do |s|
      s.merge(value: E2ESeal.seal(s[:value], @team_key, @key_version, team_id: TEAM_ID, secret_id: s[:id], version: 1,
                                                                       environment: s[:environment], name: s[:name]))
    end
    StubApi.shared.reset(sealed, token: @token, e2e: { team_id: TEAM_ID, key_version: @key_version, links: [],
                                                       wrapped_key: E2ESeal.wrap(@team_key, TEAM_ID, @key_version, @recipient) })
  end
end

# The helpers e2e_test.rb uses (CvsmTest includes them).
module FakeApiHelpers
  Request = Struct.new(:path, :headers)

  # The shared stub as e2e_test.rb's server: its base URL and the requests it answered.
  StubLog = Struct.new(:base_url) do
    def log = StubApi.shared.requests.map { |r| Request.new(r["path"], r["headers"]) }
  end

  # A FakeApi on the shared stub; returns [api, server].
  def start_api = [FakeApi.new, StubLog.new(StubApi.shared.base_url)]

  # The paths of the requests +server+ answered, without the /api/v1 prefix.
  def paths(server) = server.log.map { |r| r.path.delete_prefix("/api/v1") }
end
