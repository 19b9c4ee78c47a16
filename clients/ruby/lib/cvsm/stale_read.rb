# frozen_string_literal: true

# What the client tells its on_stale hook when it answers a read with a kept value.
module Cvsm
  # Cvsm::StaleRead describes one read answered with a kept value instead of an error (R14),
  # as passed to the +on_stale+ hook of Cvsm::Client:
  #
  # +name+::  the secret read by #get, or nil for #get_all
  # +error+:: the Cvsm::Error the refresh ended with (a Cvsm::NetworkError, a Cvsm::RateLimitError
  #           or a Cvsm::ApiError for a 5xx); raise it from the hook to refuse the kept value
  # +age+::   seconds since the kept value was fetched
  #
  # It never holds the value itself, so printing or logging it shows none.
  StaleRead = Struct.new(:name, :error, :age, keyword_init: true) do
    def initialize(...)
      super
      freeze
    end
  end
end
