# frozen_string_literal: true

require "openssl"

# The cryptography of end-to-end teams, as docs/e2e.md defines it (version 1 of the formats).
module Cvsm
  # Opens what the server of an end-to-end team serves: it splits a token from its key part,
  # unwraps the team key sent for the token (+cvsm-wrap1.…+) and opens sealed values
  # (+cvsm-e2e1.…+). X25519, HKDF-SHA256 and AES-256-GCM come from the openssl library that
  # Ruby ships; nothing here is hand-written cryptography. A key, an envelope or a wrap that is
  # malformed or does not open raises {Cvsm::DecryptionError}, whose message never holds a key or
  # a value.
  #
  # The openssl gem of Ruby 3.1 has no constructor for raw X25519 keys, so each key is read from
  # its DER encoding: a fixed prefix (PKCS#8 for a private key, SubjectPublicKeyInfo for a public
  # one) followed by the 32 raw bytes.
  # @api private
  module E2E
    # Bytes in a team key, an X25519 key and an HKDF output.
    KEY_SIZE = 32
    # Bytes in an AES-256-GCM nonce.
    NONCE_SIZE = 12
    # Bytes in an AES-256-GCM tag, at the end of every ciphertext.
    TAG_SIZE = 16

    # The DER of an X25519 private key (PKCS#8) up to its 32 raw bytes.
    PRIVATE_DER_PREFIX = ["302e020100300506032b656e04220420"].pack("H*").freeze
    # The DER of an X25519 public key (SubjectPublicKeyInfo) up to its 32 raw bytes.
    PUBLIC_DER_PREFIX = ["302a300506032b656e032100"].pack("H*").freeze

    B64U = "[A-Za-z0-9_-]+"
    UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    NUMBER = "[1-9][0-9]{0,9}"
    ENVELOPE = /\Acvsm-e2e1\.(#{NUMBER})\.(#{UUID})\.(#{NUMBER})\.(#{B64U})\.(#{B64U})\z/o.freeze
    WRAP = /\Acvsm-wrap1\.(#{B64U})\.(#{B64U})\.(#{B64U})\z/o.freeze
    LINK = /\Acvsm-link1\.(#{B64U})\.(#{B64U})\z/o.freeze
    TOKEN = /\A(cvsm_[0-9a-f]{64})\.(#{B64U})\.(#{NUMBER})\.(#{B64U})\z/o.freeze
    TOKEN_V1 = /\Acvsm_[0-9a-f]{64}\.#{B64U}\z/o.freeze
    private_constant :B64U, :UUID, :NUMBER, :ENVELOPE, :WRAP, :LINK, :TOKEN, :TOKEN_V1

    # A token string of the first format (+cvsm_<64 hex>.<key>+, no pin): made before format 2,
    # it must be made again. Configuration turns it into a Cvsm::ConfigurationError.
    class FirstFormatToken < ArgumentError; end

    # The parts of a sealed value (+cvsm-e2e1.…+); +ciphertext+ ends with the GCM tag. Its
    # #inspect shows the numbers and the size, never the ciphertext.
    Envelope = Struct.new(:key_version, :secret_id, :version, :nonce, :ciphertext) do
      # @return [String] the key version, secret id, version and size only
      def inspect
        "#<#{self.class.name} key_version=#{key_version} secret_id=#{secret_id.inspect} " \
          "version=#{version} #{ciphertext.bytesize} bytes>"
      end
      alias_method :to_s, :inspect
    end

    # The team keys as the client holds them once unwrapped and verified against the token's
    # pin: the team's id and the current key version, as the server sent them with the wrap, and
    # the keys of the versions the verified chain reached, kept in a closure rather than an
    # instance variable. It prints, dumps to YAML or JSON as a placeholder that shows the team
    # and version only, and Marshal refuses it.
    class TeamKey
      include Redaction::Placeholder

      # @return [String] the team's id (a UUID)
      attr_reader :team_id
      # @return [Integer] the current key version
      attr_reader :key_version

      # @param team_id [String] the team's id (a UUID)
      # @param key_version [Integer] the current key version
      # @param keys [Hash{Integer => String}, String] the 32-byte keys by version (or the key of
      #   +key_version+ alone)
      def initialize(team_id, key_version, keys)
        @team_id = team_id.dup.freeze
        @key_version = key_version
        keys = { key_version => keys } if keys.is_a?(String)
        keys = keys.to_h { |version, key| [version, key.b.freeze] }.freeze
        @reveal = ->(version) { keys[version] }
        @versions = keys.keys.freeze
        freeze
      end

      # The 32 bytes of the key of +version+ (the current one by default), nil when the verified
      # chain did not reach it; the only way to read them.
      # @param version [Integer] a key version
      # @return [String, nil]
      def key(version = key_version) = @reveal.call(version)

      # Whether the key of +version+ is held.
      # @param version [Integer] a key version
      # @return [Boolean]
      def key?(version) = @versions.include?(version)

      private

      def redacted_text = "#<#{self.class.name} team_id=#{team_id.inspect} key_version=#{key_version}>"
      def marshal_refusal = "a cvsm team key cannot be marshalled"
    end

    module_function

    # Splits a token of an end-to-end team,
    # +cvsm_<64 hex>.<b64u private key>.<key version>.<b64u commitment>+, into the API token the
    # server knows, the X25519 private key and the pin (the key version current when the token
    # was made and that key's commitment, docs/e2e.md "Format 2"). A token without a dot has no
    # key part. Only tokens that start with +cvsm_+ are split: a JWT is sent as it is.
    #
    # @param token [String] the whole token, trimmed
    # @return [Array(String, String, Integer, String)] the API token, the 32-byte private key,
    #   the pinned key version and the 32-byte commitment, or +[token, nil, nil, nil]+ when it has
    #   no key part
    # @raise [FirstFormatToken] for a token of the first format (no pin)
    # @raise [ArgumentError] when a +cvsm_+ token has a dot but not this shape (the message
    #   never quotes it)
    def split_token(token)
      return [token, nil, nil, nil] unless token.start_with?("cvsm_") && token.include?(".")

      match = TOKEN.match(token)
      key = match && decode(match[2], KEY_SIZE)
      pin = match && decode(match[4], KEY_SIZE)
      return [match[1], key, Integer(match[3], 10), pin] if key && pin

      raise FirstFormatToken, "a token of the first format (no pin)" if TOKEN_V1.match?(token)

      raise ArgumentError, "a token with a key part must look like " \
                           "cvsm_<64 hex>.<private key>.<key version>.<commitment>"
    end

    # +C_v+: the 32-byte commitment to team +team_id+'s key of version +key_version+,
    # HKDF-SHA256(team key, salt "", info "cvsm-e2e:v2:commit:<team>:<version>").
    #
    # @param team_key [String] the 32-byte team key
    # @param team_id [String] the team's id (a UUID)
    # @param key_version [Integer] the key's version
    # @return [String] 32 bytes
    def commitment(team_key, team_id, key_version)
      OpenSSL::KDF.hkdf(team_key, salt: "", info: "cvsm-e2e:v2:commit:#{team_id}:#{key_version}",
                                  length: KEY_SIZE, hash: "SHA256")
    end

    # The links of a key answer by the version each is stored with (+nil+: none): a list of
    # {"key_version" => Integer of at least 2, given once, "link" => "cvsm-link1.<nonce>.<ct>"}.
    # Every link is checked, needed or not.
    #
    # @raise [DecryptionError] when one is malformed: the answer is not used
    def parse_links(raw)
      return {} if raw.nil?
      raise DecryptionError, "the links of the key answer are not a list" unless raw.is_a?(Array)

      raw.each_with_object({}) do |item, links|
        version = item.is_a?(Hash) ? item["key_version"] : nil
        link = item.is_a?(Hash) ? item["link"] : nil
        unless version.is_a?(Integer) && version >= 2 && !links.key?(version) && link.is_a?(String)
          raise DecryptionError, "the links of the key answer are not [{key_version, link}, ...]"
        end

        link_parts(link, version)
        links[version] = link
      end
    end

    # The nonce and ciphertext of the link +link+ stored with +new_version+.
    #
    # @raise [DecryptionError] when it is not cvsm-link1.<12-byte nonce>.<48-byte ciphertext>
    def link_parts(link, new_version)
      match = link.is_a?(String) && LINK.match(link)
      nonce = match && decode(match[1], NONCE_SIZE)
      ciphertext = match && decode(match[2], KEY_SIZE + TAG_SIZE)
      raise DecryptionError, "the link of key version #{new_version} is not a cvsm-link1 link" unless nonce && ciphertext

      [nonce, ciphertext]
    end

    # Opens the link stored with key version +new_version+ (+cvsm-link1.<nonce>.<ct>+): the key
    # of version +new_version - 1+, sealed under that of +new_version+.
    #
    # @param link [String] the link
    # @param new_key [String] the 32-byte key of +new_version+
    # @param team_id [String] the team's id (a UUID)
    # @param new_version [Integer] the version the link is stored with
    # @return [String] the 32-byte key of +new_version - 1+
    # @raise [Cvsm::DecryptionError] when the link is malformed or does not open
    def open_link(link, new_key, team_id, new_version)
      nonce, ciphertext = link_parts(link, new_version)
      decrypt(new_key, nonce, ciphertext, "cvsm-e2e:v2:link:#{team_id}:#{new_version}") ||
        raise(DecryptionError, "the link of key version #{new_version} does not open with the key of that version")
    end

    # The team keys from +current_version+ down to +min(pin_version, down_to)+, by version, after
    # checking that the chain of links from +current_key+ reaches the pinned key version and that
    # key's commitment is +pin_commitment+ (compared in constant time).
    #
    # @param current_key [String] the 32-byte key of +current_version+
    # @param current_version [Integer] the current key version, as the server answered it
    # @param team_id [String] the team's id (a UUID)
    # @param links [Hash{Integer => String}] each version's link, by the version it is stored with
    # @param pin_version [Integer] the token's pinned key version
    # @param pin_commitment [String] the token's 32-byte commitment
    # @param down_to [Integer, nil] a version below the pin to walk down to as well
    # @return [Hash{Integer => String}] the keys, by version
    # @raise [Cvsm::DecryptionError] when the current version is below the pin, a link is
    #   missing or does not open, or the commitment differs
    def verify_chain(current_key, current_version, team_id, links, pin_version, pin_commitment, down_to: nil)
      if current_version < pin_version
        raise DecryptionError, "the team key is version #{current_version}, below the token's pinned version #{pin_version}"
      end

      lowest = down_to.nil? ? pin_version : [1, [pin_version, down_to].min].max
      keys = { current_version => current_key }
      key = current_key
      current_version.downto(lowest + 1) do |version|
        link = links[version] || raise(DecryptionError, "the link of key version #{version} is missing")
        key = open_link(link, key, team_id, version)
        keys[version - 1] = key
      end
      unless OpenSSL.fixed_length_secure_compare(commitment(keys.fetch(pin_version), team_id, pin_version),
                                                 pin_commitment)
        raise DecryptionError, "the team key does not match the token's pinned commitment of key version #{pin_version}"
      end

      keys
    end

    # Opens the team key wrapped to a recipient (+cvsm-wrap1.<eph>.<nonce>.<ct>+) with the
    # recipient's private key, for team +team_id+ at +key_version+.
    #
    # @param wrapped [String] the wrap, as +GET /teams/{team}/e2e/key+ answers it
    # @param team_id [String] the team's id (a UUID), as that answer gives it
    # @param key_version [Integer] the key's version, as that answer gives it
    # @param private_key [String] the recipient's 32-byte X25519 private key
    # @return [String] the 32-byte team key (binary)
    # @raise [Cvsm::DecryptionError] when the wrap is malformed or does not open with this key
    def unwrap_team_key(wrapped, team_id:, key_version:, private_key:)
      match = wrapped.is_a?(String) && WRAP.match(wrapped)
      eph_public = match && decode(match[1], KEY_SIZE)
      nonce = match && decode(match[2], NONCE_SIZE)
      ciphertext = match && decode(match[3], KEY_SIZE + TAG_SIZE)
      unless eph_public && nonce && ciphertext
        raise DecryptionError, "the team key sent for this token is not a cvsm-wrap1 wrap"
      end

      own = x25519_private(private_key)
      own_public = public_key_of(own)
      shared = shared_secret(own, eph_public)
      wrapping = OpenSSL::KDF.hkdf(shared, salt: eph_public + own_public, info: "cvsm-e2e:v1:wrap",
                                           length: KEY_SIZE, hash: "SHA256")
      aad = "cvsm-e2e:v1:team-key:#{team_id}:#{key_version}"
      decrypt(wrapping, nonce, ciphertext, aad) ||
        raise(DecryptionError, "the team key sent for this token does not open with the token's key part")
    end

    # The parts of a sealed value, or nil when +envelope+ is not one.
    #
    # @param envelope [String] a +cvsm-e2e1.<key version>.<secret id>.<version>.<nonce>.<ct>+
    # @return [Envelope, nil]
    def parse_envelope(envelope)
      match = envelope.is_a?(String) && ENVELOPE.match(envelope)
      return nil unless match

      nonce = decode(match[4], NONCE_SIZE)
      ciphertext = decode(match[5])
      return nil unless nonce && ciphertext && ciphertext.bytesize >= TAG_SIZE

      Envelope.new(Integer(match[1], 10), match[2], Integer(match[3], 10), nonce, ciphertext)
    end

    # Opens a sealed value, which must have been sealed for +environment+ and +name+ in
    # +team_id+: the associated data is built from them and from the envelope's secret id and
    # version, so a server cannot serve one secret's value as another's, or another
    # environment's.
    #
    # @param envelope [String, Envelope] the sealed value, or its parsed parts
    # @param team_key [String] the 32-byte team key it was sealed under
    # @param team_id [String] the team's id (a UUID)
    # @param environment [String] the environment the value was asked for
    # @param name [String] the name it was asked for
    # @return [String] the value (UTF-8)
    # @raise [Cvsm::DecryptionError] when the envelope is malformed, does not open with this key
    #   for this team, environment and name, or does not hold UTF-8 text; the message names the
    #   secret, never the value
    def open_value(envelope, team_key, team_id:, environment:, name:)
      parts = envelope.is_a?(Envelope) ? envelope : parse_envelope(envelope)
      what = "secret #{name.inspect} of #{environment}"
      raise DecryptionError, "#{what} is not a sealed value (cvsm-e2e1)" unless parts

      aad = "cvsm-e2e:v1:secret:#{team_id}:#{parts.secret_id}:#{parts.version}:#{environment}:#{name}"
      plain = decrypt(team_key, parts.nonce, parts.ciphertext, aad)
      raise DecryptionError, "#{what} does not open with the team key (altered, or sealed for another secret)" unless plain

      plain.force_encoding(Encoding::UTF_8)
      raise DecryptionError, "#{what} does not hold UTF-8 text" unless plain.valid_encoding?

      plain
    end

    # The X25519 private key whose 32 raw bytes are +raw+; it checks a token's key part too.
    # @param raw [String] 32 bytes
    # @return [OpenSSL::PKey::PKey]
    # @raise [Cvsm::DecryptionError] when it is not 32 bytes
    def x25519_private(raw)
      unless raw.is_a?(String) && raw.bytesize == KEY_SIZE
        raise DecryptionError, "an X25519 private key is #{KEY_SIZE} bytes"
      end

      OpenSSL::PKey.read(PRIVATE_DER_PREFIX + raw.b)
    end

    # The 32 raw bytes of the public key of +private+.
    # @param key [OpenSSL::PKey::PKey] an X25519 private key
    # @return [String] 32 bytes
    def public_key_of(key)
      key.public_to_der.byteslice(-KEY_SIZE, KEY_SIZE)
    end

    # X25519 of +key+ and the raw public key +peer+; an all-zero result (a low-order public
    # key) is refused.
    # @param key [OpenSSL::PKey::PKey] an X25519 private key
    # @param peer [String] the peer's 32-byte public key
    # @return [String] the 32-byte shared secret
    # @raise [Cvsm::DecryptionError] when the public key is not usable
    def shared_secret(key, peer)
      shared = key.derive(OpenSSL::PKey.read(PUBLIC_DER_PREFIX + peer))
      raise DecryptionError, "the public key is not usable (low order)" if shared.bytes.all?(&:zero?)

      shared
    rescue OpenSSL::PKey::PKeyError
      raise DecryptionError, "the public key is not usable (low order)"
    end

    # AES-256-GCM decryption of +ciphertext+ (the tag at its end), or nil when the tag does not
    # verify.
    # @param key [String] 32 bytes
    # @param nonce [String] 12 bytes
    # @param ciphertext [String] the ciphertext followed by its 16-byte tag
    # @param aad [String] the associated data
    # @return [String, nil] the plaintext (binary), or nil
    def decrypt(key, nonce, ciphertext, aad)
      cipher = OpenSSL::Cipher.new("aes-256-gcm").decrypt
      cipher.key = key
      cipher.iv = nonce
      cipher.auth_tag = ciphertext.byteslice(-TAG_SIZE, TAG_SIZE)
      cipher.auth_data = aad.b
      body = ciphertext.byteslice(0, ciphertext.bytesize - TAG_SIZE)
      plain = body.empty? ? +"" : cipher.update(body) # update refuses an empty string
      plain << cipher.final
    rescue OpenSSL::Cipher::CipherError
      nil
    end

    # The bytes of the canonical base64url text +text+ (no padding), or nil when it is not that
    # or, with +size+, not that many bytes.
    # @param text [String] base64url without padding
    # @param size [Integer, nil] the number of bytes expected
    # @return [String, nil]
    def decode(text, size = nil)
      data = (text.tr("-_", "+/") + ("=" * (-text.length % 4))).unpack1("m0")
      return nil unless [data].pack("m0").tr("+/", "-_").delete("=") == text
      return nil if size && data.bytesize != size

      data
    rescue ArgumentError
      nil
    end

    private_class_method :shared_secret, :decrypt, :decode
  end
end
