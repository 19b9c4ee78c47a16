# frozen_string_literal: true

require "json"

# How the SDK's objects that hold a token or secret values print and serialise: written once,
# mixed into each of them.
module Cvsm
  # The printing and serialising of objects that hold a token or secret values, so that
  # +inspect+, +to_s+, +pp+, YAML, JSON and Marshal never show either.
  # @api private
  module Redaction
    # Mixed into an object that stands for one secret (the token, a cached value): it prints and
    # dumps to YAML or JSON as a placeholder, and Marshal refuses it. The includer defines the
    # private methods +redacted_text+ (the placeholder) and +marshal_refusal+ (the message).
    module Placeholder
      # @return [String] the placeholder, never the secret
      def inspect = redacted_text

      # @return [String] the placeholder, as {#inspect}
      def to_s = inspect

      # Makes +pp+ print the placeholder.
      # @param printer [PP] the pretty printer
      # @return [void]
      def pretty_print(printer) = printer.text(inspect)

      # Makes +to_yaml+ write the placeholder.
      # @param coder [Psych::Coder] the YAML coder
      # @return [void]
      def encode_with(coder) = coder.scalar = inspect

      # @return [String] the placeholder, for JSON encoders that ask for it
      def as_json(*) = inspect

      # @param args [Array] the generator's state, passed on
      # @return [String] the placeholder as a JSON string
      def to_json(*args) = inspect.to_json(*args)

      # Refuses: a secret is never marshalled.
      # @raise [TypeError] always
      def marshal_dump = raise(TypeError, marshal_refusal)
    end

    # Mixed into an object that holds a token or values among its settings (a client, its
    # configuration, transport and cache): it prints and dumps to YAML or JSON the settings it
    # shows, nothing else, and Marshal refuses it. The includer defines the private methods
    # +shown_settings+ (a Hash) and +marshal_refusal+ (the message).
    module Settings
      # @return [String] the class and the shown settings, e.g. +#<Cvsm::Client team="acme" ...>+
      def inspect
        "#<#{self.class.name} #{shown_settings.map { |key, value| "#{key}=#{value.inspect}" }.join(' ')}>"
      end

      # @return [String] the same text as {#inspect}
      def to_s = inspect

      # Makes +pp+ print the same text as {#inspect}.
      # @param printer [PP] the pretty printer
      # @return [void]
      def pretty_print(printer) = printer.text(inspect)

      # Makes +to_yaml+ write the shown settings, nothing else.
      # @param coder [Psych::Coder] the YAML coder
      # @return [void]
      def encode_with(coder) = shown_settings.each { |key, value| coder[key.to_s] = value }

      # @return [Hash{String => Object}] the shown settings, for JSON encoders that ask for them
      def as_json(*) = shown_settings.transform_keys(&:to_s)

      # @param args [Array] the generator's state, passed on
      # @return [String] the shown settings as a JSON object
      def to_json(*args) = as_json.to_json(*args)

      # Refuses: the object holds a token or secret values.
      # @raise [TypeError] always
      def marshal_dump = raise(TypeError, marshal_refusal)
    end
  end
end
