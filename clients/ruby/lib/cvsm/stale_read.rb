# frozen_string_literal: true

# What the client tells its on_stale hook when it answers a read with a kept value.
module Cvsm
  # Describes one read answered with a kept value instead of an error (R14), as passed to the
  # +on_stale+ hook of {Cvsm::Client}. It never holds the value itself, so printing or logging
  # it shows none. Frozen.
  #
  # @!attribute [r] name
  #   @return [String, nil] the secret read by {Cvsm::Client#get}, or nil for {Cvsm::Client#get_all}
  # @!attribute [r] error
  #   @return [Cvsm::Error] what the refresh ended with (a {Cvsm::NetworkError}, a
  #     {Cvsm::RateLimitError} or a {Cvsm::ApiError} for a 5xx); raise it from the hook to refuse
  #     the kept value
  # @!attribute [r] age
  #   @return [Float] seconds since the kept value was fetched
  StaleRead = Struct.new(:name, :error, :age, keyword_init: true) do
    # @overload initialize(name:, error:, age:)
    #   @param name [String, nil] the secret, or nil for get_all
    #   @param error [Cvsm::Error] what the refresh ended with
    #   @param age [Float] seconds since the kept value was fetched
    def initialize(...)
      super
      freeze
    end
  end
end
